"""PyTorch's throughput on the zoo's shapes, to sit beside `hotpath bench --mode backtest|fresh`.

    python3 bench/pytorch_throughput.py --hotpath build/hotpath [--device cuda] [--dtype fp16]
        [--models lstm_s,nv_small] [--batches 1024,8192,65536] [--seconds 2] [--threads N]
        [--inputs device|host|both] [--json out.json]

What is measured: nn.LSTM (cuDNN on the GPU, PyTorch's CPU kernels on the CPU) and nn.Linear on the
last step, over full windows [B, W, I] -> [B, O] under torch.inference_mode(), each window from zero
state: the work of a fresh-window batch, and the best a PyTorch user can do for a sliding-window backtest
(nn.LSTM cannot share a window's steps with the next window). Each batch size is timed over repeated
calls for about --seconds after 3 warm-up calls, synchronising once at the end (throughput, not
latency); the rate is windows per second, and the best batch size is reported per model as
"best_windows_per_s". Streaming backtests (W = 1 in the zoo's vollo shapes): one step of B independent
streams per call, [B, 1, I] with (h, c) carried, reported as steps per second.

--inputs (cuda): where each call's inputs start. device (the default): already on the GPU, as a PyTorch
pipeline that keeps its data there has them. host: in pinned host memory, copied to the GPU by each call
(non_blocking) and its outputs copied back into pinned host memory, as hotpath's own calls with host arrays
do: the like-for-like of `hotpath bench` without --device-arrays. both: each batch size both ways.

The error column is PyTorch's own: max |z - z64| / max(1, max |z64|) of its outputs on 64 windows against
the same module in float64 on the CPU (docs/model.md's error measure), so its precision is judged like
ours.

The model shapes come from `hotpath models` (the zoo has one definition, in the C++ library). Weights
are PyTorch's default initialisation with a fixed seed: the speed does not depend on their values.
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time

import torch
from torch import nn


def zoo(hotpath: str) -> dict:
    out = subprocess.run([hotpath, "models"], check=True, capture_output=True, text=True).stdout.splitlines()
    shapes = {}
    for line in out[1:]:
        name, i, h, l, o, w, _params = line.split()
        shapes[name] = {"I": int(i), "H": int(h), "L": int(l), "O": int(o), "W": max(1, int(w))}
    return shapes


class Net(nn.Module):
    def __init__(self, s: dict):
        super().__init__()
        self.lstm = nn.LSTM(s["I"], s["H"], s["L"], batch_first=True)
        self.head = nn.Linear(s["H"], s["O"])

    def forward(self, x, state=None):
        y, state = self.lstm(x, state)
        return self.head(y[:, -1]), state


def error_against_f64(s: dict, net: Net, x: torch.Tensor) -> float:
    r64 = Net(s).double()
    r64.load_state_dict({k: v.double().cpu() for k, v in net.state_dict().items()})
    with torch.inference_mode():
        z = net(x)[0].double().cpu()
        z64 = r64(x.double().cpu())[0]
    return float((z - z64).abs().max() / max(1.0, float(z64.abs().max())))


def measure(s: dict, device: str, dtype: torch.dtype, batch: int, seconds: float, inputs: str = "device") -> dict:
    torch.manual_seed(1)
    net = Net(s).to(device=device, dtype=dtype).eval()
    W = s["W"]
    x = torch.randn(batch, W, s["I"], device=device, dtype=dtype)
    from_host = inputs == "host" and device == "cuda"
    if from_host:  # the inputs in pinned host memory, float32 as a caller holds them; outputs back there
        x_host = torch.randn(batch, W, s["I"], dtype=torch.float32).pin_memory()
        z_host = torch.empty(batch, s["O"], dtype=torch.float32).pin_memory()
    streaming = W == 1
    state = None

    def call(state):
        if not from_host:
            return net(x, state)
        z, st = net(x_host.to(device, non_blocking=True).to(dtype), state)
        z_host.copy_(z, non_blocking=True)
        return z, st

    with torch.inference_mode():
        for _ in range(3):
            _, st = call(state)
            state = st if streaming else None
        if device == "cuda":
            torch.cuda.synchronize()
        calls, t0 = 0, time.perf_counter()
        while True:
            _, st = call(state)
            state = st if streaming else None
            calls += 1
            if calls % 4 == 0:
                if device == "cuda":
                    torch.cuda.synchronize()
                if time.perf_counter() - t0 >= seconds:
                    break
        elapsed = time.perf_counter() - t0
    rate = calls * batch / elapsed
    flops = 2.0 * sum(4 * s["H"] * ((s["I"] if l == 0 else s["H"]) + s["H"]) for l in range(s["L"])) * W + 2.0 * s["O"] * s["H"]
    return {"batch": batch, "inputs": "host" if from_host else "device", "calls": calls, "seconds": elapsed,
            "windows_per_s": rate, "tflops": rate * flops / 1e12, "error": error_against_f64(s, net, x[:64])}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hotpath", required=True, help="the hotpath binary (for the zoo's shapes)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    p.add_argument("--dtype", default=None, choices=["fp16", "bf16", "fp32"], help="default: fp16 on cuda, fp32 on cpu")
    p.add_argument("--models", default="", help="comma-separated zoo names (default: all)")
    p.add_argument("--batches", default="1024,8192,65536")
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--threads", type=int, default=0, help="CPU: torch.set_num_threads (default: PyTorch's)")
    p.add_argument("--inputs", default="device", choices=["device", "host", "both"],
                   help="cuda: inputs already on the GPU, or copied from pinned host memory by each call (and outputs back)")
    p.add_argument("--json", default="")
    a = p.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("pytorch_throughput: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype or ("fp16" if a.device == "cuda" else "fp32")]
    if a.device == "cuda":
        torch.backends.cudnn.benchmark = True
    shapes = zoo(a.hotpath)
    names = [n for n in a.models.split(",") if n] or list(shapes)
    for n in names:
        if n not in shapes:
            print(f"pytorch_throughput: '{n}' is not a zoo model ({', '.join(shapes)})", file=sys.stderr)
            return 2
    report = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "device": a.device,
              "gpu": torch.cuda.get_device_name() if a.device == "cuda" else None, "cpu": platform.processor(),
              "threads": torch.get_num_threads(), "dtype": str(dtype).replace("torch.", ""), "models": {}}
    kinds = ["device", "host"] if a.inputs == "both" else [a.inputs]
    if a.device != "cuda":
        kinds = ["device"]  # on the CPU the inputs are where the work is
    for n in names:
        runs = []
        for b in [int(v) for v in a.batches.split(",") if v]:
            for kind in kinds:
                try:
                    runs.append(measure(shapes[n], a.device, dtype, b, a.seconds, kind))
                except torch.OutOfMemoryError:
                    runs.append({"batch": b, "inputs": kind, "skipped": "out of memory"})
                    torch.cuda.empty_cache()
        entry = {"shape": shapes[n], "runs": runs}
        for kind in kinds:  # best_windows_per_s: inputs on the device (as before); *_host_inputs: from the host
            ok = [r for r in runs if "windows_per_s" in r and r.get("inputs", "device") == kind]
            best = max(ok, key=lambda r: r["windows_per_s"]) if ok else None
            suffix = "" if kind == "device" else "_host_inputs"
            entry.update({"best_windows_per_s" + suffix: best and best["windows_per_s"],
                          "best_batch" + suffix: best and best["batch"], "best_tflops" + suffix: best and best["tflops"]})
        report["models"][n] = entry
        ok = [r for r in runs if "windows_per_s" in r]
        print(f"{n:12s} W={shapes[n]['W']:<4d} " + "  ".join(
            (f"B={r['batch']} ({r['inputs']}): {r['windows_per_s']:,.0f}/s" if "windows_per_s" in r
             else f"B={r['batch']} ({r['inputs']}): {r['skipped']}") for r in runs)
            + (f"  error {max(r['error'] for r in ok):.2g}" if ok else ""), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
