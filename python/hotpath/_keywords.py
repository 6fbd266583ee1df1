"""A misspelt keyword argument named, with the parameter it is closest to: the one message for it, given
by the package's Python functions and by the extension's Engine, Instances, run, backtest and run_batch
(python/ext/module.cpp, refuse_unknown_keywords, calls unknown_keyword), e.g. `load() got an unknown keyword argument 'windw' (did you mean 'window'?)`."""
from __future__ import annotations

import functools
import inspect
from typing import Callable, Sequence, TypeVar

F = TypeVar("F", bound=Callable)


def _edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        diag, row[0] = row[0], i
        for j in range(1, len(b) + 1):
            up = row[j]
            row[j] = min(row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1]))
            diag = up
    return row[len(b)]


def unknown_keyword(fn: str, key: str, params: Sequence[str]) -> TypeError:
    """The TypeError for keyword `key`, which no parameter of `fn` takes: the closest public parameter
    is suggested when it is at most two edits away."""
    msg = f"{fn}() got an unknown keyword argument '{key}'"
    best, best_d = None, 3
    for p in params:
        if not p.startswith("_"):
            d = _edit_distance(key, p)
            if d < best_d:
                best, best_d = p, d
    if best is not None:
        msg += f" (did you mean '{best}'?)"
    return TypeError(msg)


def named_keywords(fn: F) -> F:
    """fn, refusing a keyword argument it does not take with unknown_keyword's message (Python's own
    names no alternative)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = [n for n, p in inspect.signature(fn).parameters.items() if p.kind in kinds]
    known = frozenset(params)

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        for key in kwargs:
            if key not in known:
                raise unknown_keyword(fn.__name__, key, params)
        return fn(*args, **kwargs)

    return checked  # type: ignore[return-value]
