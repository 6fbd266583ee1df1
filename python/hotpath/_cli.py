"""The `hotpath` command of the Python package (a console script, and `python -m hotpath`).

`hotpath import` is answered here (it needs the onnx package); every other subcommand is the bundled
C++ CLI (hotpath/bin/hotpath, installed with the wheel), which this process becomes (exec), so its
exit code, signals and terminal handling are the CLI's own.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import List, Optional

IMPORT_HELP = "Convert an ONNX model (LSTM nodes + Gemm/MatMul head) to a hotpath .safetensors model"


def cli_path() -> Optional[str]:
    """The bundled C++ CLI, or None in a package built without it (HOTPATH_CLI=OFF, no CLI11)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "hotpath")
    return path if os.access(path, os.X_OK) else None


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "import":
        return import_command(argv[1:])
    exe = cli_path()
    if exe is None:
        print("hotpath: error: this hotpath package was built without the hotpath command (HOTPATH_CLI=OFF or "
              "no CLI11 headers at build time); `hotpath import` and the Python API work", file=sys.stderr)
        return 2
    if argv in (["-h"], ["--help"]):
        # The CLI's own help, and the subcommand this package adds to it.
        sys.stdout.flush()
        rc = subprocess.call([exe] + argv)
        print(f"\nPython package subcommand:\n  import  {IMPORT_HELP} (hotpath import --help)")
        return rc
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, ["hotpath"] + argv)
    return 2  # not reached


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, as the C++ CLI
        self.exit(2, f"{self.prog}: error: {message}\n")


def _window(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--window {text!r} is not a decimal integer") from None
    if not 1 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"--window {value} is out of range 1..10000")
    return value


def import_command(argv: List[str]) -> int:
    parser = _Parser(prog="hotpath import", description=IMPORT_HELP + ". The window is the input's fixed "
                     "sequence length, if it has one; --window sets it.")
    parser.add_argument("--onnx", required=True, help="the ONNX model (.onnx)")
    parser.add_argument("--out", required=True, help="the hotpath model to write (.safetensors)")
    parser.add_argument("--window", type=_window, help="the model's window (1..10000)")
    args = parser.parse_args(argv)
    try:
        if not args.out.lower().endswith(".safetensors"):
            raise ValueError(f"--out must be a .safetensors file, not {args.out}")
        from . import _files, _hotpath, _onnx

        _files.check_output(args.out, "--out")
        data, converted = _onnx.to_safetensors(args.onnx, args.onnx, args.window)
        model = _hotpath._open_model_bytes(data, args.onnx, None, None, args.window)  # the engine's checks
        _files.write_atomically(args.out, data, "--out")
    except (ValueError, OSError) as e:  # hotpath.Error is a ValueError
        parser.exit(2, f"hotpath import: error: {str(e).splitlines()[0] if str(e) else type(e).__name__}\n")
    window = model.window if model.window is not None else "none (streaming; give --window for window mode)"
    print(f"{args.onnx} -> {args.out}: I={model.input_size} H={model.hidden_size} L={model.num_layers} "
          f"O={model.output_size}, bias {model.bias}, {model.dtype}, input {converted.input_layout}, window {window}, "
          f"output at {'every step' if converted.every_step else 'the last step'}")
    return 0
