"""Backtests of many series spread over a Ray cluster (docs/ray.md).

    import hotpath.ray
    result = hotpath.ray.backtest("lstm_s", {"AAPL": x1, "MSFT": x2}, backend="cpu", mode="streaming")
    result.outputs["AAPL"]        # [T, O], as a local engine computes it
    result.failures               # {key: hotpath's message} for the series that could not run

Workers are Ray actors that each hold one hotpath engine (on a GPU with num_gpus=1, else on num_cpus
cores). The model's bytes go through the object store once. Series of the same length are batched
into one [S, T, I] backtest per shard, shards sized so that every worker stays busy. A worker that dies
has its shards re-run by the others (or by a new one when none is left), and every shard's result is
taken exactly once.
"""
from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Hashable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _hotpath
from ._load import load

__all__ = ["BacktestResult", "backtest"]

Key = Hashable


@dataclass
class BacktestResult:
    """What backtest() returns. `outputs` has the input's keys and order (a list: None where a series
    failed; a dict: the keys that succeeded); `failures` maps each failed key to hotpath's message."""

    outputs: Union[List[Optional[np.ndarray]], Dict[Key, np.ndarray]]
    failures: Dict[Key, str] = field(default_factory=dict)
    windows: int = 0  # outputs computed (rows of [T, O] over the good series)
    seconds: float = 0.0  # wall time from the first shard sent to the last result
    windows_per_s: float = 0.0
    workers: Dict[str, Dict[str, float]] = field(default_factory=dict)  # worker -> windows, seconds, windows_per_s
    shards: int = 0
    retried_shards: int = 0  # shards re-run after their worker died


def _import_ray() -> Any:
    try:
        import ray  # noqa: PLC0415 (only this module needs it)
    except ImportError as e:
        raise ImportError("hotpath.ray needs the ray package (pip install ray)") from e
    return ray


def _model_bytes(model: Any) -> bytes:
    """The model as safetensors bytes: loaded (validated) here once, so a bad model fails before any
    worker starts."""
    if not isinstance(model, _hotpath.Model):
        model = load(model)
    return model.to_safetensors()


class _Worker:
    """One engine on one Ray actor; runs shards of series."""

    def __init__(self, model: bytes, options: Dict[str, Any], method: str):
        import hotpath  # noqa: PLC0415 (in the worker process)

        self.name = f"{os.uname().nodename}:{os.getpid()}"
        self.engine = hotpath.Engine(hotpath.load(model), **options)
        self.method = method

    def _one(self, series: np.ndarray) -> np.ndarray:
        if self.method == "run":
            self.engine.reset()
            out = self.engine.run(series)
            self.engine.reset()
            return out
        return self.engine.backtest(series)

    def run(self, shard: int, series: List[Any]) -> Tuple[int, List[Any], int, float, str]:
        """[series...] -> (shard, [outputs or ("error", message)], windows, seconds, worker)."""
        t0 = time.perf_counter()
        results: List[Any] = []
        stacked = None
        if self.method == "backtest" and len(series) > 1:
            try:
                stacked = self.engine.backtest(np.stack([np.asarray(s) for s in series]))
            except (_hotpath.Error, ValueError, TypeError):
                stacked = None  # one of them is bad: each alone, so that only it fails
        if stacked is not None:
            results = [stacked[i] for i in range(len(series))]
        else:
            for s in series:
                try:
                    results.append(self._one(s))
                except (_hotpath.Error, ValueError, TypeError) as e:
                    results.append(("error", str(e)))
        windows = sum(int(r.shape[0]) for r in results if isinstance(r, np.ndarray))
        return shard, results, windows, time.perf_counter() - t0, self.name


class _Progress:
    """One line on stderr, redrawn: shards done, windows/s, ETA."""

    def __init__(self, enabled: Optional[bool], total: int):
        self.on = sys.stderr.isatty() if enabled is None else enabled
        self.total = total
        self.t0 = time.perf_counter()

    def update(self, done: int, windows: int) -> None:
        if not self.on:
            return
        el = max(time.perf_counter() - self.t0, 1e-9)
        eta = el / done * (self.total - done) if done else float("nan")
        sys.stderr.write(
            f"\rhotpath.ray: {done}/{self.total} shards, {windows / el:,.0f} windows/s, ETA {eta:.0f} s   "
        )
        sys.stderr.flush()

    def close(self, summary: str) -> None:
        if self.on:
            sys.stderr.write("\n" + summary + "\n")


def _as_items(series: Any) -> Tuple[List[Key], List[Any], bool]:
    if isinstance(series, Mapping):
        return list(series.keys()), list(series.values()), True
    if isinstance(series, (list, tuple)):
        return list(range(len(series))), list(series), False
    raise TypeError(
        "hotpath.ray.backtest() takes a list of [T, I] arrays or a dict key -> array, not " + type(series).__name__
    )


def _shards(arrays: List[Any], workers: int, shard_windows: Optional[int]) -> List[List[int]]:
    """Indices grouped by shape (one [S, T, I] call per shard), about shard_windows outputs each."""
    groups: Dict[Any, List[int]] = {}
    total = 0
    for i, a in enumerate(arrays):
        shape = getattr(a, "shape", None)
        key = tuple(shape) if shape is not None and len(shape) == 2 else ("alone", i)
        groups.setdefault(key, []).append(i)
        total += int(shape[0]) if shape is not None and len(shape) >= 1 else 1
    target = shard_windows or max(1, math.ceil(total / (4 * workers)))
    shards: List[List[int]] = []
    for key, idx in groups.items():
        length = key[0] if isinstance(key[0], int) else 1
        per = max(1, target // max(1, length))
        shards += [idx[k : k + per] for k in range(0, len(idx), per)]
    return shards


def backtest(
    model: Any,
    series: Union[Sequence[Any], Mapping[Key, Any]],
    *,
    backend: str = "auto",
    precision: Optional[str] = None,
    mode: str = "window",
    window: Optional[int] = None,
    workers: Optional[int] = None,
    num_gpus: float = 0,
    num_cpus: float = 1,
    shard_windows: Optional[int] = None,
    method: str = "backtest",
    progress: Optional[bool] = None,
    max_retries: int = 3,
    engine_options: Optional[Mapping[str, Any]] = None,
    _kill_a_worker_after: Optional[int] = None,
) -> BacktestResult:
    """Every series' backtest (SPEC §3.3, as Engine.backtest) on Ray workers.

    model: anything hotpath.load() takes, or a hotpath.Model. series: a list of [T, I] arrays or a dict
    key -> array (T may differ between series). backend/precision/mode/window: the Engine's options
    (engine_options: any others, e.g. {"cpuset": "0-3"}). workers: actors to start (default: as many as
    the cluster's free CPUs / num_cpus, or GPUs / num_gpus). num_gpus=1 puts each worker on a GPU.
    shard_windows: outputs per shard (default: a quarter of each worker's share). method: "backtest"
    (series of one length batched into one call; bitwise what a local Engine.backtest of each series
    gives) or "run" (each series through Engine.run from a reset state; bitwise a local run's).
    progress: a progress line on stderr (default: when stderr is a terminal). max_retries: shards are
    re-run at most this many times after their worker dies; past it they fail with the Ray error.
    Ray must be initialised (ray.init(address=...)) for a cluster; otherwise a local one is started.
    """
    ray = _import_ray()
    if method not in ("backtest", "run"):
        raise ValueError(f"method must be 'backtest' or 'run', not {method!r}")
    keys, arrays, as_dict = _as_items(series)
    options: Dict[str, Any] = dict(engine_options or {})
    options.update(backend=backend, precision=precision, mode=mode, window=window)
    blob = _model_bytes(model)
    if not ray.is_initialized():
        ray.init()
    if workers is None:
        res = ray.available_resources()
        workers = int(res.get("GPU", 0) // num_gpus) if num_gpus else int(res.get("CPU", 1) // max(num_cpus, 1e-9))
    workers = max(1, int(workers))
    arrays = [np.ascontiguousarray(a, dtype=np.float32) if isinstance(a, np.ndarray) else a for a in arrays]
    shards = _shards(arrays, workers, shard_windows)

    model_ref = ray.put(blob)  # once through the object store; each actor receives the bytes
    actor_cls = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus)(_Worker)

    def start() -> Any:
        return actor_cls.remote(model_ref, options, method)

    pool = [start() for _ in range(min(workers, len(shards)) or 1)]
    result_of: Dict[int, Tuple[List[Any], int, float, str]] = {}
    tries = [0] * len(shards)
    failed_shard: Dict[int, str] = {}
    pending = list(range(len(shards)))[::-1]  # a stack: shard 0 first
    in_flight: Dict[Any, Tuple[int, Any]] = {}  # future -> (shard, actor)
    busy: Dict[Any, int] = {a: 0 for a in pool}
    retried = 0
    bar = _Progress(progress, len(shards))
    windows_done = 0
    results_seen = 0
    t0 = time.perf_counter()

    def submit() -> None:
        for actor in list(busy):
            while busy.get(actor, 2) < 2 and pending:
                s = pending.pop()
                fut = actor.run.remote(s, [arrays[i] for i in shards[s]])
                in_flight[fut] = (s, actor)
                busy[actor] += 1

    submit()
    try:
        while in_flight:
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            fut = ready[0]
            s, actor = in_flight.pop(fut)
            if actor in busy:
                busy[actor] -= 1
            try:
                shard, outs, windows, seconds, name = ray.get(fut)
            except ray.exceptions.RayTaskError as e:  # the worker's code raised (not a hotpath error)
                failed_shard[s] = f"worker error: {e}"
                submit()
                continue
            except ray.exceptions.RayError as e:
                # The worker (or its node, or the result's copy) is gone: its shards go back in the queue
                # for the workers left (a replacement could wait forever for the lost node's resources),
                # each result still taken once; a new worker only when none is left.
                if actor in busy:
                    del busy[actor]
                    ray.kill(actor, no_restart=True)
                    if not busy:
                        busy[start()] = 0
                tries[s] += 1
                if tries[s] > max_retries:
                    failed_shard[s] = f"its worker was lost {tries[s]} times: {e}"
                else:
                    retried += 1
                    pending.append(s)
                submit()
                continue
            if shard not in result_of:  # exactly once
                result_of[shard] = (outs, windows, seconds, name)
                windows_done += windows
                results_seen += 1
                bar.update(len(result_of) + len(failed_shard), windows_done)
                if _kill_a_worker_after is not None and results_seen == _kill_a_worker_after:
                    # Test hook: kill a worker that still has shards in flight.
                    victims = [a for a in busy if busy[a] > 0]
                    if victims:
                        ray.kill(victims[0], no_restart=True)
            submit()
    finally:
        for a in list(busy):
            ray.kill(a, no_restart=True)
    seconds = time.perf_counter() - t0

    outputs: List[Optional[np.ndarray]] = [None] * len(keys)
    failures: Dict[Key, str] = {}
    per_worker: Dict[str, Dict[str, float]] = {}
    for s, idx in enumerate(shards):
        if s in failed_shard:
            for i in idx:
                failures[keys[i]] = failed_shard[s]
            continue
        outs, windows, secs, name = result_of[s]
        w = per_worker.setdefault(name, {"windows": 0.0, "seconds": 0.0})
        w["windows"] += windows
        w["seconds"] += secs
        for i, o in zip(idx, outs):
            if isinstance(o, tuple):
                failures[keys[i]] = o[1]
            else:
                outputs[i] = o
    for w in per_worker.values():
        w["windows_per_s"] = w["windows"] / w["seconds"] if w["seconds"] > 0 else 0.0
    total = sum(int(o.shape[0]) for o in outputs if o is not None)
    bar.close(
        f"hotpath.ray: {total:,} windows in {seconds:.2f} s: {total / max(seconds, 1e-9):,.0f} windows/s; per worker: "
        + ", ".join(f"{n} {w['windows_per_s']:,.0f}" for n, w in sorted(per_worker.items()))
        + (f"; {len(failures)} series failed" if failures else "")
    )
    result_outputs: Union[List[Optional[np.ndarray]], Dict[Key, np.ndarray]]
    if as_dict:
        result_outputs = {k: o for k, o in zip(keys, outputs) if o is not None}
    else:
        result_outputs = outputs
    return BacktestResult(
        outputs=result_outputs,
        failures=failures,
        windows=total,
        seconds=seconds,
        windows_per_s=total / seconds if seconds > 0 else 0.0,
        workers=per_worker,
        shards=len(shards),
        retried_shards=retried,
    )
