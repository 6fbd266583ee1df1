"""Backtests of many series spread over a Ray cluster (docs/ray.md).

    import hotpath.ray
    result = hotpath.ray.backtest("lstm_s", {"AAPL": x1, "MSFT": x2}, backend="cpu", mode="streaming")
    result.outputs["AAPL"]        # [T, O], as a local engine computes it
    result.failures               # {key: hotpath's message} for the series that could not run

`series` may also be a Ray Dataset with a key column and a [T, I] series column: the outputs are then a
Ray Dataset (key, output) in the input's order, computed and kept on the cluster.

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
from ._keywords import named_keywords
from ._load import load

__all__ = ["BacktestResult", "backtest"]

Key = Hashable


@dataclass
class BacktestResult:
    """What backtest() returns. `outputs` has the input's keys and order (a list: None where a series
    failed; a dict or a Ray Dataset: the keys that succeeded); `failures` maps each failed key to
    hotpath's message."""

    outputs: Union[List[Optional[np.ndarray]], Dict[Key, np.ndarray], Any]  # Any: a ray.data.Dataset
    failures: Dict[Key, str] = field(default_factory=dict)
    windows: int = 0  # outputs computed (rows of [T, O] over the good series)
    seconds: float = 0.0  # wall time from the first shard sent to the last result
    windows_per_s: float = 0.0
    workers: Dict[str, Dict[str, float]] = field(default_factory=dict)  # worker -> windows, seconds, windows_per_s
    shards: int = 0
    retried_shards: int = 0  # shards re-run after their worker died
    startup_seconds: float = 0.0  # starting the workers (engines built), before `seconds` starts


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


_core_slot_files: List[Any] = []  # held open for the worker's life: its claim on its cores


def _claim_cores(count: int) -> Optional[List[int]]:
    """`count` cores of this node that no other hotpath.ray worker on it holds, or None when all are
    taken. Claims are flock()s on /tmp files, one per group of `count` cores, so they end with the
    process however it ends (a crashed worker's cores are free again)."""
    import fcntl  # noqa: PLC0415 (POSIX only)

    cores = sorted(os.sched_getaffinity(0))
    folder = os.path.join("/tmp", f"hotpath-ray-{os.getuid()}")
    os.makedirs(folder, exist_ok=True)
    for slot in range(len(cores) // count):
        f = open(os.path.join(folder, f"cores-{count}-{slot}.lock"), "w")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        _core_slot_files.append(f)
        return cores[slot * count : (slot + 1) * count]
    return None


class _Worker:
    """One engine on one Ray actor; runs shards of series."""

    def __init__(self, model: bytes, options: Dict[str, Any], method: str, cores: int = 0):
        import hotpath  # noqa: PLC0415 (in the worker process)

        self.name = f"{os.uname().nodename}:{os.getpid()}"
        options = dict(options)
        if cores > 0 and options.get("cpuset") is None:
            # A CPU worker's engine runs on num_cpus cores of its own (without a cpuset it would start a
            # thread per core of the node, and workers sharing a node would fight over them).
            options["cpuset"] = _claim_cores(cores)
        self.engine = hotpath.Engine(hotpath.load(model), **options)
        self.method = method

    def ready(self) -> str:
        return self.name

    def _one(self, series: np.ndarray) -> np.ndarray:
        if self.method == "run":
            self.engine.reset()
            out = self.engine.run(series)
            self.engine.reset()
            return out
        return self.engine.backtest(series)

    def run(self, shard: int, series: Union[List[Any], np.ndarray]) -> Tuple[int, List[Any], int, float, str]:
        """[series...] or [S, T, I] -> (shard, [outputs or ("error", message)], windows, seconds, worker)."""
        t0 = time.perf_counter()
        results: List[Any] = []
        stacked = None
        if self.method == "backtest" and len(series) > 1:
            try:
                # The driver sends a shard of one shape already stacked ([S, T, I], read in place from
                # the object store); a list only when the shapes differ (then one of them is bad).
                whole = series if isinstance(series, np.ndarray) else np.stack([np.asarray(s) for s in series])
                stacked = self.engine.backtest(whole)
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


class _DatasetWorker:
    """map_batches' callable class for a Ray Dataset: one engine per actor, a batch of rows in, the same
    rows out with their outputs ([0, O] and an error message for a bad series)."""

    def __init__(self, model: Any, options: Dict[str, Any], method: str, key: str, column: str,
                 cores: int = 0, crash_once: Optional[str] = None):
        import ray  # noqa: PLC0415 (in the worker process)

        if isinstance(model, ray.ObjectRef):
            model = ray.get(model)
        self.worker = _Worker(model, options, method, cores)
        self.key, self.column, self.crash_once = key, column, crash_once

    def __call__(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        if self.crash_once and not os.path.exists(self.crash_once):
            # Test hook: the first batch anywhere kills its worker process mid-run, once.
            open(self.crash_once, "w").close()
            os._exit(1)
        raw = batch[self.column]
        series = []
        for s in raw:  # a [S, T, I] array when the batch's rows share a shape, else an object array
            try:
                series.append(np.ascontiguousarray(s, dtype=np.float32))
            except (ValueError, TypeError):
                series.append(s)  # the engine names what is wrong with it
        _, results, windows, seconds, name = self.worker.run(0, series)
        outputs_size = self.worker.engine.output_size
        outs: List[np.ndarray] = []
        errors: List[str] = []
        for r in results:
            if isinstance(r, np.ndarray):
                outs.append(r)
                errors.append("")
            else:
                outs.append(np.zeros((0, outputs_size), np.float32))
                errors.append(r[1])
        rows = np.array([o.shape[0] for o in outs], np.int64)
        # The batch's busy time shared over its rows by their outputs, so that sums per worker add up.
        share = rows / windows if windows else np.full(len(outs), 1.0 / max(1, len(outs)))
        if all(o.shape == outs[0].shape for o in outs):
            output: Any = np.stack(outs) if outs else np.zeros((0, 0, outputs_size), np.float32)
        else:
            output = np.empty(len(outs), dtype=object)
            output[:] = outs
        return {
            self.key: batch[self.key],
            "output": output,
            "error": np.array(errors, dtype=object),
            "windows": rows,
            "seconds": seconds * share,
            "worker": np.array([name] * len(outs), dtype=object),
        }


def _drop_failed(table: Any, key: str) -> Any:
    """The good rows of a batch (pyarrow), with only the key and the output."""
    import pyarrow.compute as pc  # noqa: PLC0415 (ray.data brings pyarrow)

    return table.filter(pc.equal(table["error"], "")).select([key, "output"])


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


def _is_dataset(series: Any) -> bool:
    return type(series).__module__.startswith("ray.data") and hasattr(series, "map_batches")


def _as_items(series: Any) -> Tuple[List[Key], List[Any], bool]:
    if isinstance(series, Mapping):
        return list(series.keys()), list(series.values()), True
    if isinstance(series, (list, tuple)):
        return list(range(len(series))), list(series), False
    raise TypeError(
        "hotpath.ray.backtest() takes a list of [T, I] arrays, a dict key -> array or a Ray Dataset, not "
        + type(series).__name__
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
    if shard_windows is None:
        # Each worker's first shard in quarters: a worker waits for its first input to be copied into
        # the object store, and a smaller one starts it sooner (the rest arrive while it works).
        head: List[List[int]] = []
        for sh in shards[:workers]:
            q = max(1, math.ceil(len(sh) / 4))
            head += [sh[k : k + q] for k in range(0, len(sh), q)]
        shards = head + shards[workers:]
    return shards


def _backtest_dataset(
    ray: Any,
    ds: Any,
    model_ref: Any,
    options: Dict[str, Any],
    method: str,
    workers: int,
    num_cpus: float,
    num_gpus: float,
    shard_windows: Optional[int],
    key: str,
    column: str,
    progress: Optional[bool],
    crash_once: Optional[str],
) -> BacktestResult:
    """The Dataset path: map_batches over an actor pool of engines (Ray Data re-runs the blocks of a
    lost worker and keeps each block's result once), materialised on the cluster in the input's order."""
    try:
        import ray.data  # noqa: PLC0415, F401
    except ImportError as e:
        raise ImportError("a Ray Dataset input needs ray's data extra (pip install 'ray[data]')") from e
    names = ds.columns()
    missing = [c for c in (key, column) if c not in (names or [])]
    if missing:
        raise ValueError(
            f"the Ray Dataset has no column {missing[0]!r} (its columns: {names}); name the key and series "
            "columns with key_column= and series_column="
        )
    first = ds.take(1)
    length = int(np.shape(first[0][column])[0]) if first else 1
    batch_rows = max(1, (shard_windows or 262144) // max(1, length))

    # The dataset's own context (it was bound when the dataset was made), restored afterwards.
    ctx = getattr(ds, "context", None) or ray.data.DataContext.get_current()
    saved = (ctx.execution_options.preserve_order, ctx.enable_progress_bars)
    ctx.execution_options.preserve_order = True  # the outputs in the input's order
    show = sys.stderr.isatty() if progress is None else bool(progress)
    ctx.enable_progress_bars = show
    t0 = time.perf_counter()
    try:
        scored = ds.map_batches(
            _DatasetWorker,
            fn_constructor_args=(model_ref, options, method, key, column, _worker_cores(num_cpus, num_gpus), crash_once),
            batch_size=batch_rows,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=workers),
            num_cpus=num_cpus,
            num_gpus=num_gpus or None,
        ).materialize()
        seconds = time.perf_counter() - t0
        stats = scored.select_columns([key, "error", "windows", "seconds", "worker"]).take_all()
        outputs = scored.map_batches(_drop_failed, fn_kwargs={"key": key}, batch_format="pyarrow").materialize()
    finally:
        ctx.execution_options.preserve_order, ctx.enable_progress_bars = saved
    failures = {r[key]: r["error"] for r in stats if r["error"]}
    per_worker: Dict[str, Dict[str, float]] = {}
    for r in stats:
        w = per_worker.setdefault(r["worker"], {"windows": 0.0, "seconds": 0.0})
        w["windows"] += float(r["windows"])
        w["seconds"] += float(r["seconds"])
    total = int(sum(r["windows"] for r in stats))
    result = _result(outputs, failures, total, seconds, per_worker, shards=scored.num_blocks())
    if show:
        sys.stderr.write(_summary(total, seconds, per_worker, failures) + "\n")
    return result


def _worker_cores(num_cpus: float, num_gpus: float) -> int:
    """How many cores of its own a worker's engine takes: num_cpus for a CPU worker; a GPU worker's
    engine chooses its own."""
    return int(num_cpus) if not num_gpus and num_cpus >= 1 else 0


def _result(outputs: Any, failures: Dict[Key, str], total: int, seconds: float,
            per_worker: Dict[str, Dict[str, float]], **more: Any) -> BacktestResult:
    for w in per_worker.values():
        w["windows_per_s"] = w["windows"] / w["seconds"] if w["seconds"] > 0 else 0.0
    return BacktestResult(outputs=outputs, failures=failures, windows=total, seconds=seconds,
                          windows_per_s=total / seconds if seconds > 0 else 0.0, workers=per_worker, **more)


def _summary(total: int, seconds: float, per_worker: Dict[str, Dict[str, float]], failures: Dict[Key, str]) -> str:
    return (
        f"hotpath.ray: {total:,} windows in {seconds:.2f} s: {total / max(seconds, 1e-9):,.0f} windows/s; per worker: "
        + ", ".join(f"{n} {w['windows_per_s']:,.0f}" for n, w in sorted(per_worker.items()))
        + (f"; {len(failures)} series failed" if failures else "")
    )


@named_keywords
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
    key_column: str = "key",
    series_column: str = "series",
    startup_grace_s: float = 60.0,
    _kill_a_worker_after: Optional[int] = None,
    _crash_a_worker_once: Optional[str] = None,
) -> BacktestResult:
    """Every series' backtest (docs/model.md, "Backtests"; as Engine.backtest) on Ray workers.

    model: anything hotpath.load() takes, or a hotpath.Model. series: a list of [T, I] arrays, a dict
    key -> array (T may differ between series), or a Ray Dataset whose rows hold a key (key_column) and a
    [T, I] array (series_column); its outputs are a Ray Dataset of (key, output) rows in the input's
    order, materialised on the cluster (Ray Data re-runs a lost worker's blocks).
    backend/precision/mode/window: the Engine's options
    (engine_options: any others, e.g. {"cpuset": "0-3"}). workers: actors to start (default: as many as
    the cluster's free CPUs / num_cpus, or GPUs / num_gpus). num_gpus=1 puts each worker on a GPU.
    shard_windows: outputs per shard (default: a quarter of each worker's share). method: "backtest"
    (series of one length batched into one call; bitwise what a local Engine.backtest of each series
    gives) or "run" (each series through Engine.run from a reset state; bitwise a local run's).
    progress: a progress line on stderr (default: when stderr is a terminal). max_retries: shards are
    re-run at most this many times after their worker dies; past it they fail with the Ray error.
    startup_grace_s: once one worker has started, how long the others may take (those later, e.g. for
    want of room on the cluster, are left out). Ray must be initialised (ray.init(address=...)) for a
    cluster; otherwise a local one is started.
    """
    ray = _import_ray()
    if method not in ("backtest", "run"):
        raise ValueError(f"method must be 'backtest' or 'run', not {method!r}")
    dataset = _is_dataset(series)
    if not dataset:
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
    have = ray.cluster_resources()
    for name, need in (("GPU", num_gpus), ("CPU", num_cpus)):
        if need > have.get(name, 0):
            raise ValueError(f"a worker needs {need:g} {name}s but the Ray cluster has {have.get(name, 0):g}")
    model_ref = ray.put(blob)  # once through the object store; each actor receives the bytes
    if dataset:
        return _backtest_dataset(
            ray, series, model_ref, options, method, workers, num_cpus, num_gpus, shard_windows,
            key_column, series_column, progress, _crash_a_worker_once,
        )
    arrays = [np.ascontiguousarray(a, dtype=np.float32) if isinstance(a, np.ndarray) else a for a in arrays]
    shards = _shards(arrays, workers, shard_windows)

    actor_cls = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus)(_Worker)

    def start() -> Any:
        return actor_cls.remote(model_ref, options, method, _worker_cores(num_cpus, num_gpus))

    # The workers start (each builds its engine) before the clock does: `seconds` is the backtest's.
    t_start = time.perf_counter()
    pool = [start() for _ in range(min(workers, len(shards)) or 1)]
    pool_all = list(pool)
    ready = {a.ready.remote(): a for a in pool}
    # Wait for one, then give the others a grace period: a worker the cluster has no room for (more
    # workers asked than fit) would otherwise hold up the start for ever.
    _, rest = ray.wait(list(ready), num_returns=1)
    late: List[Any] = []
    if rest:
        _, late = ray.wait(rest, num_returns=len(rest), timeout=startup_grace_s)
    for ref in late:
        pool.remove(ready.pop(ref))
    lost: List[BaseException] = []
    for ref, a in ready.items():
        try:
            ray.get(ref)
        except ray.exceptions.RayError as e:  # its engine could not be built, or its process/node died
            pool.remove(a)
            lost.append(e)
    for a in [a for a in pool_all if a not in pool]:
        ray.kill(a, no_restart=True)
    if not pool:
        # Ray's message holds the worker's traceback; its last line is the error itself (hotpath's, when
        # the engine could not be built).
        last = [line for line in str(lost[0]).splitlines() if line.strip()][-1:] or [type(lost[0]).__name__]
        raise RuntimeError(f"no hotpath.ray worker could start; the first one's error: {last[0].strip()}") from lost[0]
    startup = time.perf_counter() - t_start
    result_of: Dict[int, Tuple[List[Any], int, float, str]] = {}
    tries = [0] * len(shards)
    failed_shard: Dict[int, str] = {}
    pending = list(range(len(shards)))[::-1]  # a stack: shard 0 first
    in_flight: Dict[Any, Tuple[int, Any]] = {}  # future -> (shard, actor)
    busy: Dict[Any, int] = {a: 0 for a in pool}  # the workers that started
    retried = 0
    bar = _Progress(progress, len(shards))
    windows_done = 0
    results_seen = 0
    t0 = time.perf_counter()

    def payload(s: int) -> Union[List[Any], np.ndarray]:
        # Stacked here, where the copy overlaps the worker's work on its previous shard, rather than
        # there, where it would not.
        items = [arrays[i] for i in shards[s]]
        if (
            method == "backtest"
            and len(items) > 1
            and all(isinstance(a, np.ndarray) for a in items)
            and len({a.shape for a in items}) == 1
        ):
            return np.stack(items)
        return items

    def submit() -> None:
        for actor in list(busy):
            while busy.get(actor, 2) < 2 and pending:
                s = pending.pop()
                fut = actor.run.remote(s, payload(s))
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
    total = sum(int(o.shape[0]) for o in outputs if o is not None)
    result_outputs: Union[List[Optional[np.ndarray]], Dict[Key, np.ndarray]]
    if as_dict:
        result_outputs = {k: o for k, o in zip(keys, outputs) if o is not None}
    else:
        result_outputs = outputs
    result = _result(result_outputs, failures, total, seconds, per_worker, shards=len(shards),
                     retried_shards=retried, startup_seconds=startup)
    bar.close(_summary(total, seconds, per_worker, failures))
    return result
