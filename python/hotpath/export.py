"""Save a PyTorch module that owns an nn.LSTM and an nn.Linear as a hotpath model file.

    import hotpath
    hotpath.export.save(net, "model.safetensors", window=50)

The file is exactly `safetensors.torch.save_file(net.state_dict(), path)` plus the config in the
safetensors `__metadata__` (keys input_size hidden_size num_layers output_size bias window lstm_prefix
head_prefix, as strings), which `hotpath` reads back:

    hotpath info   --model model.safetensors
    hotpath verify --model model.safetensors --golden golden.safetensors --backend cpu
    hotpath bench  --model model.safetensors --backend cuda --mode window

An input normalization goes with the model when given: `save(net, path, scaler=(mean, scale))` (or a
fitted sklearn StandardScaler) writes tensors `input_scaler.mean` and `input_scaler.scale` ([I], F32);
hotpath then feeds the LSTM (x - mean) / scale (`--scaler model`, the default for such a file).

Needs torch and safetensors (pip install torch safetensors) when called; importing it needs neither, nor
the rest of the package (python/hotpath_export.py loads this file alone, for scripts run from a checkout).
"""
from __future__ import annotations

from typing import Optional


def _find_single(module, kind, what):
    found = [(name, m) for name, m in module.named_modules() if isinstance(m, kind)]
    if len(found) != 1:
        names = ", ".join(n or "<root>" for n, _ in found) or "none"
        raise ValueError(f"expected exactly one {what} in the module, found: {names}")
    return found[0]


def metadata_for(net, window: Optional[int] = None) -> dict:
    """The __metadata__ hotpath reads: the config of the module's single nn.LSTM and nn.Linear head."""
    import torch.nn as nn

    lstm_name, lstm = _find_single(net, nn.LSTM, "nn.LSTM")
    head_name, head = _find_single(net, nn.Linear, "nn.Linear")
    if lstm.bidirectional:
        raise ValueError("hotpath does not support bidirectional LSTMs")
    if getattr(lstm, "proj_size", 0):
        raise ValueError("hotpath does not support proj_size > 0")
    if head.in_features != lstm.hidden_size:
        raise ValueError(f"head in_features {head.in_features} != LSTM hidden_size {lstm.hidden_size}")
    meta = {
        "input_size": str(lstm.input_size),
        "hidden_size": str(lstm.hidden_size),
        "num_layers": str(lstm.num_layers),
        "output_size": str(head.out_features),
        "bias": str(bool(lstm.bias)),
        "lstm_prefix": f"{lstm_name}." if lstm_name else "",
        "head_prefix": f"{head_name}." if head_name else "",
    }
    if window is not None:
        if int(window) < 1:
            raise ValueError("window must be >= 1")
        meta["window"] = str(int(window))
    return meta


SCALER_KEYS = ("input_scaler.mean", "input_scaler.scale")


def scaler_tensors(scaler, input_size: int) -> dict:
    """The two [I] float32 tensors of an input scaler: (mean, scale) arrays, or an object with mean_ and
    scale_ (sklearn's StandardScaler). Checked as hotpath checks them: [I], finite, scale > 0."""
    import torch

    if hasattr(scaler, "mean_") and hasattr(scaler, "scale_"):
        mean, scale = scaler.mean_, scaler.scale_
    else:
        mean, scale = scaler
    out = {}
    for key, values in zip(SCALER_KEYS, (mean, scale)):
        t = torch.as_tensor(values, dtype=torch.float64).flatten()
        if t.numel() != input_size:
            raise ValueError(f"{key} has {t.numel()} values, the LSTM's input_size is {input_size}")
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{key} holds NaN or Inf")
        out[key] = t.to(torch.float32).contiguous()
    if not bool((out["input_scaler.scale"] > 0).all()):
        raise ValueError("input_scaler.scale must be > 0 everywhere (a standard deviation)")
    return out


def save(net, path: str, window: Optional[int] = None, dtype=None, scaler=None) -> None:
    """Write net.state_dict() (optionally cast to dtype, e.g. torch.float16) with hotpath's metadata, and
    the input scaler when given ((mean, scale) or a fitted StandardScaler; never cast to dtype)."""
    from safetensors.torch import save_file

    state = {k: (v.to(dtype) if dtype is not None else v).contiguous() for k, v in net.state_dict().items()}
    meta = metadata_for(net, window)
    if scaler is not None:
        state.update(scaler_tensors(scaler, int(meta["input_size"])))
    save_file(state, path, metadata=meta)


def load(net, path: str) -> dict:
    """Load weights saved by save() back into net; returns the metadata."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    state = load_file(path)
    for key in SCALER_KEYS:  # the input scaler is not the module's
        state.pop(key, None)
    net.load_state_dict(state)
    with safe_open(path, framework="pt") as f:
        return dict(f.metadata() or {})
