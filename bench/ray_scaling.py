"""hotpath.ray's scaling figures (docs/ray.md, "Scaling"): one GPU worker against the local engine, and
CPU workers from 1 to 4 on one machine's cores.

    PYTHONPATH=build/python python3 bench/ray_scaling.py [--gpu] [--cpu] [--model lstm_s]
        [--gpu-series 512] [--gpu-ticks 10000] [--cpu-cores 1,4] [--cpu-workers 1,2,4]
        [--cpu-windows-per-core 16000] [--repeat 3] [--json out.json]

What is measured (all in one process, on a local Ray started here with the machine's CPUs and GPUs):
- GPU: the same S series of T ticks (window mode, the cuda backend's default precision) backtested by a
  local hotpath.Engine in one [S, T, I] call, then by hotpath.ray.backtest with one worker (num_gpus=1).
  The local engine is also timed over 4 equal shards, one call each (hotpath.ray makes 4 for one
  worker, the first cut in quarters): what the shard size costs, apart from Ray. The Ray rate is result.windows_per_s: every output over the wall time from the first shard sent to the
  last result taken, after the worker has started (its start, engine and CUDA context, is reported
  apart as startup_seconds). Both include the host-to-device copies; the Ray figure also includes the
  object store's copies of the inputs and outputs and the driver's bookkeeping. Best of --repeat calls.
- CPU: N workers of C cores each (num_cpus=C: each worker's engine runs on C cores of its own), the same
  total work for every N (C x --cpu-windows-per-core windows per worker-core of the 1-worker run, times
  the largest N), rate and speed-up over one worker. Best of --repeat calls.
Every Ray output is compared bitwise with the local engine's; the local engine's error against the float64
reference (docs/model.md: max |z - z64| / max(1, max |z64|)) is measured on two series.
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
import hotpath.ray as hray


def error_vs_fp64(model, xs, backend, precision) -> float:
    with hotpath.Engine(model, backend=backend, precision=precision) as fast, hotpath.Engine(
        model, backend="ref", precision="fp64"
    ) as ref:
        worst = 0.0
        for x in xs:
            z, z64 = fast.backtest(x), ref.backtest(x)
            worst = max(worst, float(np.max(np.abs(z - z64)) / max(1.0, float(np.max(np.abs(z64))))))
    return worst


def gpu_case(ray, model, args) -> dict:
    rng = np.random.default_rng(1)
    stacked = rng.standard_normal((args.gpu_series, args.gpu_ticks, model.input_size)).astype(np.float32)
    series = list(stacked)
    windows = stacked.shape[0] * stacked.shape[1]
    with hotpath.Engine(model, backend="cuda") as local:
        precision = local.precision
        local.backtest(stacked[:8])  # warm: the batch path's buffers and kernels
        local_s = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            expected = local.backtest(stacked)
            local_s.append(time.perf_counter() - t0)
        # The same engine over 4 equal shards, one call each (hotpath.ray makes 4 for one worker, the
        # first cut in quarters): what the shard size alone costs, apart from Ray's copies.
        per = max(1, args.gpu_series // 4)
        sharded_s = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            for k in range(0, args.gpu_series, per):
                local.backtest(stacked[k : k + per])
            sharded_s.append(time.perf_counter() - t0)
    runs = []
    identical = True
    for _ in range(args.repeat):
        res = hray.backtest(model, series, backend="cuda", workers=1, num_gpus=1, num_cpus=1, progress=False)
        assert not res.failures, res.failures
        identical = identical and all(np.array_equal(o, e) for o, e in zip(res.outputs, expected))
        runs.append({"seconds": res.seconds, "windows_per_s": res.windows_per_s, "startup_seconds": res.startup_seconds,
                     "shards": res.shards, "worker_busy_windows_per_s": next(iter(res.workers.values()))["windows_per_s"]})
    best_local = windows / min(local_s)
    best_ray = max(r["windows_per_s"] for r in runs)
    out = {
        "model": model.name, "precision": precision, "series": args.gpu_series, "ticks": args.gpu_ticks,
        "windows": windows, "local_seconds": local_s, "local_windows_per_s": best_local,
        "local_in_4_calls_windows_per_s": windows / min(sharded_s), "ray_runs": runs,
        "ray_windows_per_s": best_ray, "ray_over_local": best_ray / best_local, "bitwise_equal_to_local": identical,
        "error_vs_fp64": error_vs_fp64(model, [stacked[0, :2000], stacked[1, :2000]], "cuda", precision),
    }
    print(f"gpu {model.name} {precision}: local {best_local:,.0f} windows/s, 1 Ray GPU worker {best_ray:,.0f} "
          f"({100 * best_ray / best_local:.1f}% of local; the local engine in 4 calls: "
          f"{out['local_in_4_calls_windows_per_s']:,.0f}), startup {runs[0]['startup_seconds']:.2f} s, "
          f"bitwise equal: {identical}, error {out['error_vs_fp64']:.2e}", flush=True)
    return out


def cpu_case(ray, model, args, cores: int) -> dict:
    counts = [int(n) for n in args.cpu_workers.split(",")]
    rng = np.random.default_rng(2)
    ticks = 1000
    total = cores * args.cpu_windows_per_core * max(counts)
    n_series = max(max(counts) * 4, total // ticks)
    series = [rng.standard_normal((ticks, model.input_size)).astype(np.float32) for _ in range(n_series)]
    with hotpath.Engine(model, backend="cpu") as local:
        precision = local.precision
        expected = local.backtest(np.stack(series[:4]))
    rows = []
    for n in counts:
        best = None
        for _ in range(args.repeat):
            res = hray.backtest(model, series, backend="cpu", workers=n, num_cpus=cores, progress=False)
            assert not res.failures, res.failures
            assert all(np.array_equal(res.outputs[i], expected[i]) for i in range(4)), "not the local engine's answer"
            if best is None or res.windows_per_s > best["windows_per_s"]:
                best = {"workers": n, "cores_per_worker": cores, "windows": res.windows, "seconds": res.seconds,
                        "windows_per_s": res.windows_per_s, "startup_seconds": res.startup_seconds,
                        "per_worker": res.workers}
        rows.append(best)
    for r in rows:
        r["speedup_over_one"] = r["windows_per_s"] / rows[0]["windows_per_s"]
        print(f"cpu {model.name} {precision}: {r['workers']} worker(s) x {cores} core(s): {r['windows_per_s']:,.0f} "
              f"windows/s, {r['speedup_over_one']:.2f}x one worker", flush=True)
    return {"model": model.name, "precision": precision, "cores_per_worker": cores, "series": n_series,
            "ticks": ticks, "runs": rows,
            "error_vs_fp64": error_vs_fp64(model, [series[0], series[1]], "cpu", precision)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="lstm_s")
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--gpu-series", type=int, default=512)
    ap.add_argument("--gpu-ticks", type=int, default=10000)
    ap.add_argument("--cpu-cores", default="1,4", help="cores per CPU worker, each a separate table")
    ap.add_argument("--cpu-workers", default="1,2,4")
    ap.add_argument("--cpu-windows-per-core", type=int, default=16000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    import ray

    ray.init(include_dashboard=False, log_to_driver=False)
    report = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": " ".join(sys.argv),
              "machine": {"host": platform.node(), "cpus": os.cpu_count(), "ray": ray.__version__,
                          "cluster": ray.cluster_resources()}, "gpu": [], "cpu": []}
    model = hotpath.load(args.model)

    def save() -> None:  # after every case, so that a run stopped part-way keeps what it measured
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1, default=str)

    try:
        if args.gpu:
            report["gpu"].append(gpu_case(ray, model, args))
            save()
        if args.cpu:
            for c in (int(c) for c in args.cpu_cores.split(",")):
                report["cpu"].append(cpu_case(ray, model, args, c))
                save()
    finally:
        ray.shutdown()
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
