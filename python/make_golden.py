"""Make a golden case from PyTorch itself: a module with an nn.LSTM and an nn.Linear under non-default
prefixes, saved with hotpath_export.save, and PyTorch's own float64 outputs in the golden layout of
tests/data/golden (inputs [T, I], tacana_expected [T-W+1, O], streaming_expected [T, O]).

    python3 python/make_golden.py OUT_DIR [--hidden 96 --layers 3 --input 20 --output 3 --window 17]
                                          [--name case] [--plain]

tests/data/golden/README.md gives the commands that regenerate the test suite's cases.

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
    """Non-default prefixes (encoder.rnn., head.), so that prefix detection is exercised."""

    def __init__(self, i, h, layers, o, bias):
        super().__init__()
        self.encoder = nn.Module()
        self.encoder.rnn = nn.LSTM(i, h, layers, bias=bias, batch_first=True)
        self.head = nn.Linear(h, o, bias=bias)

    @property
    def lstm(self):
        return self.encoder.rnn

    def forward(self, x):  # x [B, T, I] -> [B, O] from the last step
        y, _ = self.lstm(x)
        return self.head(y[:, -1])


class PlainNet(nn.Module):
    """The layout of tests/data/golden: prefixes lstm. and fc., model saved without __metadata__."""

    def __init__(self, i, h, layers, o, bias):
        super().__init__()
        self.lstm = nn.LSTM(i, h, layers, bias=bias, batch_first=True)
        self.fc = nn.Linear(h, o, bias=bias)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.fc(y[:, -1])


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
    p.add_argument("--name", default="case", help="files NAME.model.safetensors, NAME.golden.safetensors")
    p.add_argument("--plain", action="store_true",
                   help="prefixes lstm./fc. and a model file without __metadata__ (tests/data/golden)")
    a = p.parse_args()
    torch.manual_seed(a.seed)
    cls = PlainNet if a.plain else Net
    net = cls(a.input, a.hidden, a.layers, a.output, not a.no_bias)
    os.makedirs(a.out, exist_ok=True)
    model_path = os.path.join(a.out, f"{a.name}.model.safetensors")
    if a.plain:
        save_file({k: v.contiguous() for k, v in net.state_dict().items()}, model_path)
    else:
        hotpath_export.save(net, model_path, window=a.window)

    ref = cls(a.input, a.hidden, a.layers, a.output, not a.no_bias)
    ref.load_state_dict(net.state_dict())
    ref = ref.double().eval()
    x = torch.randn(a.ticks, a.input)
    xd = x.double()
    head = ref.fc if a.plain else ref.head
    with torch.no_grad():
        y, _ = ref.lstm(xd.unsqueeze(0))
        streaming = head(y[0])
        windows = torch.stack([xd[t - a.window + 1 : t + 1] for t in range(a.window - 1, a.ticks)])
        tacana = ref(windows)
    meta = hotpath_export.metadata_for(net, a.window)
    meta.update({"ticks": str(a.ticks),
                 "oracle": f"torch {torch.__version__} nn.LSTM float64 on the stored float32 weights"})
    save_file({"inputs": x.contiguous(), "tacana_expected": tacana.contiguous(),
               "streaming_expected": streaming.contiguous()},
              os.path.join(a.out, f"{a.name}.golden.safetensors"), metadata=meta)
    print(f"wrote {a.out}/{a.name}.model.safetensors and {a.name}.golden.safetensors "
          f"(I={a.input} H={a.hidden} L={a.layers} O={a.output} W={a.window})")


if __name__ == "__main__":
    main()
