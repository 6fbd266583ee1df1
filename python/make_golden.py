"""Make a golden case from PyTorch itself: a module with an nn.LSTM and an nn.Linear under non-default
prefixes, saved with hotpath_export.save, and PyTorch's own float64 outputs in the golden layout of
../shared/golden (inputs [T, I], tacana_expected [T-W+1, O], streaming_expected [T, O]).

    python3 python/make_golden.py OUT_DIR [--hidden 96 --layers 3 --input 20 --output 3 --window 17]

Then: hotpath verify --model OUT_DIR/case.model.safetensors --golden OUT_DIR/case.golden.safetensors
Needs torch and safetensors (the GPU machine has both); used by scripts/gpu-check.sh.
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(__file__))
import hotpath_export  # noqa: E402


class Net(nn.Module):
    def __init__(self, i, h, layers, o, bias):
        super().__init__()
        self.encoder = nn.Module()
        self.encoder.rnn = nn.LSTM(i, h, layers, bias=bias, batch_first=True)
        self.head = nn.Linear(h, o, bias=bias)

    def forward(self, x):  # x [B, T, I] -> [B, O] from the last step
        y, _ = self.encoder.rnn(x)
        return self.head(y[:, -1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--input", type=int, default=20)
    p.add_argument("--hidden", type=int, default=96)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--output", type=int, default=3)
    p.add_argument("--window", type=int, default=17)
    p.add_argument("--ticks", type=int, default=64)
    p.add_argument("--no-bias", action="store_true")
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    net = Net(a.input, a.hidden, a.layers, a.output, not a.no_bias)
    os.makedirs(a.out, exist_ok=True)
    hotpath_export.save(net, os.path.join(a.out, "case.model.safetensors"), window=a.window)

    ref = Net(a.input, a.hidden, a.layers, a.output, not a.no_bias)
    ref.load_state_dict(net.state_dict())
    ref = ref.double().eval()
    x = torch.randn(a.ticks, a.input)
    xd = x.double()
    with torch.no_grad():
        y, _ = ref.encoder.rnn(xd.unsqueeze(0))
        streaming = ref.head(y[0])
        windows = torch.stack([xd[t - a.window + 1 : t + 1] for t in range(a.window - 1, a.ticks)])
        tacana = ref(windows)
    meta = hotpath_export.metadata_for(net, a.window)
    meta.update({"ticks": str(a.ticks), "oracle": f"torch {torch.__version__} nn.LSTM float64"})
    save_file({"inputs": x.contiguous(), "tacana_expected": tacana.contiguous(),
               "streaming_expected": streaming.contiguous()},
              os.path.join(a.out, "case.golden.safetensors"), metadata=meta)
    print(f"wrote {a.out}/case.model.safetensors and case.golden.safetensors "
          f"(I={a.input} H={a.hidden} L={a.layers} O={a.output} W={a.window})")


if __name__ == "__main__":
    main()
