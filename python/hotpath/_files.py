"""Output files written whole or not at all, as the hotpath command writes them: into a temporary file
beside the target, renamed over it when complete; an existing target is left alone on any error."""
from __future__ import annotations

import os
import tempfile


def check_output(path: str, flag: str) -> None:
    """Refuse a target that is a directory, a symbolic link or in a folder that does not exist, before
    any work is done (the message names `flag`)."""
    if os.path.islink(path):
        raise ValueError(f"{flag} {path} is a symbolic link; hotpath writes regular files only")
    if os.path.isdir(path):
        raise ValueError(f"{flag} {path} is a directory")
    if os.path.exists(path) and not os.path.isfile(path):
        raise ValueError(f"{flag} {path} is not a regular file")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"{flag} {path}: no such folder {folder}")


def write_atomically(path: str, data: bytes, flag: str = "path") -> None:
    check_output(path, flag)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
