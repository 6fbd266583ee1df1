"""Test helpers: a tiny safetensors reader (numpy only), the golden cases of tests/data/golden, the
error measure and bounds (docs/model.md, "The error measure and its bounds"), and an independent float64
LSTM in numpy (PyTorch nn.LSTM + nn.Linear semantics) to check the engine against without torch."""
from __future__ import annotations

import json
import pathlib
import struct
from typing import Dict, Tuple

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "data" / "golden"
GOLDEN_CASES = sorted(p.name[: -len(".model.safetensors")] for p in GOLDEN.glob("*.model.safetensors"))

# src/backend/backend.cpp error_bound(): max|z - z_ref| / max(1, max|z_ref|).
BOUND = {"fp64": 1e-9, "fp32": 1e-5, "fp16": 3e-4, "bf16": 2e-3}
# A float32 output of the float64 reference: one rounding of each value.
FLOAT32_OUTPUT_BOUND = 1e-6

_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2"}


def read_safetensors(path) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    data = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8 : 8 + n])
    metadata = header.pop("__metadata__", None) or {}
    start = 8 + n
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        a = np.frombuffer(data[start + begin : start + end], dtype=_DTYPES[info["dtype"]])
        tensors[name] = a.reshape(info["shape"]).astype(np.float64)
    return tensors, metadata


def golden(case: str):
    """(model path, inputs [T, I] float32, window, tacana_expected [T-W+1, O], streaming_expected [T, O])."""
    tensors, meta = read_safetensors(GOLDEN / f"{case}.golden.safetensors")
    return (
        GOLDEN / f"{case}.model.safetensors",
        tensors["inputs"].astype(np.float32),
        int(meta["window"]),
        tensors["tacana_expected"],
        tensors["streaming_expected"],
    )


def normalized_error(got, ref) -> float:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    return float(np.abs(got - ref).max() / max(1.0, float(np.abs(ref).max())))


def random_state_dict(rng, I, H, L, O, lstm="lstm.", head="fc.", bias=True, dtype=np.float32):
    """A PyTorch-layout state_dict with PyTorch's default init (uniform in +-1/sqrt(H))."""
    k = 1.0 / np.sqrt(H)
    sd = {}
    for layer in range(L):
        inp = I if layer == 0 else H
        sd[f"{lstm}weight_ih_l{layer}"] = rng.uniform(-k, k, (4 * H, inp))
        sd[f"{lstm}weight_hh_l{layer}"] = rng.uniform(-k, k, (4 * H, H))
        if bias:
            sd[f"{lstm}bias_ih_l{layer}"] = rng.uniform(-k, k, 4 * H)
            sd[f"{lstm}bias_hh_l{layer}"] = rng.uniform(-k, k, 4 * H)
    sd[f"{head}weight"] = rng.uniform(-k, k, (O, H))
    if bias:
        sd[f"{head}bias"] = rng.uniform(-k, k, O)
    return {name: v.astype(dtype) for name, v in sd.items()}


def _sigmoid(v):
    with np.errstate(over="ignore"):  # exp(-v) = inf for a saturated gate: 1 / inf = 0, exactly right
        return 1.0 / (1.0 + np.exp(-v))


def lstm_outputs(sd, x, lstm="lstm.", head="fc.") -> np.ndarray:
    """Head outputs after every step of x [T, I] from zero state, in float64: [T, O]."""
    sd = {k: np.asarray(v, np.float64) for k, v in sd.items()}
    L = sum(1 for k in sd if k.startswith(f"{lstm}weight_ih_l"))
    H = sd[f"{lstm}weight_hh_l0"].shape[1]
    h = np.zeros((L, H))
    c = np.zeros((L, H))
    out = []
    for xt in np.asarray(x, np.float64):
        inp = xt
        for layer in range(L):
            g = sd[f"{lstm}weight_ih_l{layer}"] @ inp + sd[f"{lstm}weight_hh_l{layer}"] @ h[layer]
            g = g + sd.get(f"{lstm}bias_ih_l{layer}", 0.0) + sd.get(f"{lstm}bias_hh_l{layer}", 0.0)
            i, f, gg, o = np.split(g, 4)
            c[layer] = _sigmoid(f) * c[layer] + _sigmoid(i) * np.tanh(gg)
            h[layer] = _sigmoid(o) * np.tanh(c[layer])
            inp = h[layer]
        out.append(sd[f"{head}weight"] @ inp + sd.get(f"{head}bias", 0.0))
    return np.array(out)


def window_outputs(sd, x, window, **prefixes) -> np.ndarray:
    """Window mode: row t is the last output over x[max(0, t-W+1) .. t] from zero state: [T, O]."""
    return np.array([lstm_outputs(sd, x[max(0, t - window + 1) : t + 1], **prefixes)[-1] for t in range(len(x))])


# --- int8 --------------------------------------------------------------------------------------------
# src/backend/backend.hpp: int8's bound is 1.5 x the error that float64 arithmetic with the int8-rounded
# weights alone makes on the same inputs, floored at fp32's bound and never above 2e-3.
INT8_BOUND_FACTOR, INT8_BOUND_CAP = 1.5, 2e-3


def int8_bound(weight_rounding_error: float) -> float:
    return min(max(INT8_BOUND_FACTOR * weight_rounding_error, BOUND["fp32"]), INT8_BOUND_CAP)


def int8_rounded_rows(w) -> np.ndarray:
    """src/model/quantize.cpp's rounding, redone in numpy: per row scale = float32(max|w_row| / 127),
    q = round(w / scale) with ties away from zero (std::round), clamped to [-127, 127], 0 in a row of
    zeros; the value q * scale in float64 (Int8Rows::value)."""
    w = np.asarray(w, np.float64)
    scale = (np.abs(w).max(axis=1) / 127.0).astype(np.float32).astype(np.float64)[:, None]
    v = w / np.where(scale == 0, 1.0, scale)
    t = np.trunc(v)
    q = t + np.sign(v) * (np.abs(v - t) >= 0.5)  # exact: v - t is exact, unlike floor(v + 0.5)
    q = np.where(scale == 0, 0.0, np.clip(q, -127, 127))
    return q * scale


def int8_rounded_state_dict(sd) -> Dict[str, np.ndarray]:
    """Every weight matrix (W_ih, W_hh of each layer, the head's weight) rounded as the int8 path rounds
    it, in float64 (held exactly by an F64 file); biases unchanged."""
    def is_weight(name):
        last = name.rsplit(".", 1)[-1]
        return last == "weight" or last.startswith("weight_ih_l") or last.startswith("weight_hh_l")

    return {k: int8_rounded_rows(v) if is_weight(k) else np.asarray(v, np.float64) for k, v in sd.items()}


# --- input scaling -----------------------------------------------------------------------------------


def _negligible(std, mean):
    # src/scaling/input_scaler.cpp: a spread this small against the mean is a constant feature (scale 1).
    return ~(std > 1e-12 * np.maximum(1.0, np.abs(mean)))


def rolling_scaled(x, n) -> np.ndarray:
    """`rolling:n` computed directly in float64: tick t scaled by the mean and population standard
    deviation of the raw ticks t-n .. t-1 (fewer at the start; shift 0 with none, scale 1 below 2, and
    for a feature with no spread)."""
    x = np.asarray(x, np.float64)
    out = np.empty_like(x)
    for t in range(len(x)):
        past = x[max(0, t - n) : t]
        mean = past.mean(axis=0) if len(past) else np.zeros(x.shape[1])
        mul = np.ones(x.shape[1])
        if len(past) >= 2:
            std = past.std(axis=0)
            mul = np.where(_negligible(std, mean), 1.0, 1.0 / np.where(std > 0, std, 1.0))
        out[t] = (x[t] - mean) * mul
    return out
