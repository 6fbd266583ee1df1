"""What the Python binding adds to one tick: engine.step(x) timed from Python beside Engine::step timed
in C++ (hotpath._hotpath._time_step_cpp), on the same engine, input and process, in one run.

    PYTHONPATH=build/python .venv/bin/python bench/python_overhead.py [--model lstm_s] [--backend cpu]
        [--precision fp32] [--mode streaming] [--ticks 200000] [--rounds 10] [--cpuset 1] [--json out.json]

Each side is timed per call (C++: std::chrono::steady_clock around Engine::step into a preallocated
output; Python: time.perf_counter_ns around engine.step(x), which allocates its output array, and
around engine.step(x, out=z)). Many short rounds alternate C++ and Python, so that the load of a busy
machine falls on both alike; the overhead is the median over rounds of (Python's p50 - C++'s p50) in
the same round (the difference of the pooled p50s is reported too). The target (docs/python.md,
"Overhead"): at most 1 us at p50 on the CPU backend. Each Python sample also holds one perf_counter_ns
call (clock_ns; not subtracted).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

import hotpath
from hotpath import _hotpath

TARGET_NS = 1000.0


def percentiles(samples: np.ndarray) -> dict:
    p50, p90, p99 = np.percentile(samples, [50, 90, 99])
    return {"p50_ns": float(p50), "p90_ns": float(p90), "p99_ns": float(p99), "mean_ns": float(samples.mean()),
            "min_ns": float(samples.min()), "count": int(samples.size)}


def time_python(engine, x, n: int, out=None) -> np.ndarray:
    samples = [0] * n
    clock = time.perf_counter_ns
    step = engine.step
    if out is None:
        for k in range(n):
            t0 = clock()
            step(x)
            samples[k] = clock() - t0
    else:
        for k in range(n):
            t0 = clock()
            step(x, out)
            samples[k] = clock() - t0
    return np.asarray(samples, dtype=np.int64)


def clock_cost(n: int) -> float:
    clock = time.perf_counter_ns
    samples = [0] * n
    for k in range(n):
        t0 = clock()
        samples[k] = clock() - t0
    return float(np.median(samples))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="lstm_s")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--mode", default="streaming", help="streaming (default: the step alone) or window")
    p.add_argument("--ticks", type=int, default=200_000, help="measured ticks per side (and per Python variant)")
    p.add_argument("--warmup", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=100, help="alternations of C++ and Python")
    p.add_argument("--cpuset", default=None, help="cores for the engine, e.g. 1 (default: unpinned)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", default=None, help="write the result here ('-': stdout)")
    p.add_argument("--check", action="store_true", help="exit 1 when the p50 overhead exceeds 1 us")
    a = p.parse_args()
    if a.ticks < a.rounds or a.rounds < 1:
        p.error("--ticks must be >= --rounds >= 1")

    model = hotpath.load(a.model)
    engine = hotpath.Engine(model, backend=a.backend, precision=a.precision, mode=a.mode, cpuset=a.cpuset)
    x = np.random.default_rng(a.seed).standard_normal(model.input_size).astype(np.float32)
    out = np.empty(model.output_size, np.float32)
    # Both paths must compute the same thing.
    engine.reset()
    z_py = engine.step(x).copy()
    engine.reset()
    _hotpath._time_step_cpp(engine, x, 1)
    engine.reset()
    engine.step(x, out)
    if not np.array_equal(z_py, out):
        print("python_overhead: engine.step(x) and engine.step(x, out) disagree", file=sys.stderr)
        return 1

    _hotpath._time_step_cpp(engine, x, a.warmup)
    time_python(engine, x, a.warmup)
    time_python(engine, x, a.warmup, out)
    per_round = a.ticks // a.rounds
    cpp, py, py_out = [], [], []
    for _ in range(a.rounds):
        cpp.append(_hotpath._time_step_cpp(engine, x, per_round))
        py.append(time_python(engine, x, per_round))
        py_out.append(time_python(engine, x, per_round, out))
    cpp_s, py_s, out_s = percentiles(np.concatenate(cpp)), percentiles(np.concatenate(py)), percentiles(np.concatenate(py_out))

    def paired(python_rounds):
        return float(np.median([np.median(p) - np.median(c) for p, c in zip(python_rounds, cpp)]))

    overhead, overhead_out = paired(py), paired(py_out)
    result = {
        "benchmark": "python_overhead",
        "model": model.name,
        "backend": engine.backend,
        "variant": engine.variant,
        "precision": engine.precision,
        "mode": engine.mode,
        "cpuset": a.cpuset,
        "ticks_per_side": per_round * a.rounds,
        "rounds": a.rounds,
        "cpp_step": cpp_s,
        "python_step": py_s,
        "python_step_out": out_s,
        "overhead_p50_ns": overhead,
        "overhead_out_p50_ns": overhead_out,
        "pooled_overhead_p50_ns": py_s["p50_ns"] - cpp_s["p50_ns"],
        "pooled_overhead_out_p50_ns": out_s["p50_ns"] - cpp_s["p50_ns"],
        "pooled_overhead_p99_ns": py_s["p99_ns"] - cpp_s["p99_ns"],
        "clock_ns": clock_cost(100_000),
        "target_ns": TARGET_NS,
        "pass": overhead <= TARGET_NS,
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
                    "python": platform.python_version(), "numpy": np.__version__},
        "hotpath": {"version": hotpath.__version__, "commit": _hotpath.git_commit},
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    engine.close()

    row = "{:<28} {:>9.0f} {:>9.0f} {:>9.0f}"
    print(f"{model.name}, backend {result['backend']} ({result['precision']}, {result['variant']}), "
          f"{result['mode']} mode, {result['ticks_per_side']} ticks per side in {a.rounds} rounds")
    print("{:<28} {:>9} {:>9} {:>9}".format("ns per step", "p50", "p99", "mean"))
    print(row.format("C++ Engine::step", cpp_s["p50_ns"], cpp_s["p99_ns"], cpp_s["mean_ns"]))
    print(row.format("Python engine.step(x)", py_s["p50_ns"], py_s["p99_ns"], py_s["mean_ns"]))
    print(row.format("Python engine.step(x, out)", out_s["p50_ns"], out_s["p99_ns"], out_s["mean_ns"]))
    print(f"pooled p50 difference: {result['pooled_overhead_p50_ns']:.0f} ns (step(x)), "
          f"{result['pooled_overhead_out_p50_ns']:.0f} ns (step(x, out))")
    print(f"overhead p50 (median of {a.rounds} paired rounds): {overhead:.0f} ns (step(x)), {overhead_out:.0f} ns "
          f"(step(x, out)); target <= {TARGET_NS:.0f} ns: {'PASS' if result['pass'] else 'FAIL'} "
          f"(clock call {result['clock_ns']:.0f} ns included)")
    if a.json == "-":
        json.dump(result, sys.stdout, indent=2)
        print()
    elif a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return 1 if a.check and not result["pass"] else 0


if __name__ == "__main__":
    sys.exit(main())
