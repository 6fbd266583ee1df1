"""Outputs against the truth: PyTorch's golden cases (tests/data/golden), the engine's float64
reference backend, and an independent float64 numpy LSTM, within the engine's bounds
(docs/model.md, "The error measure and its bounds")."""
import numpy as np
import pytest

import hotpath
from conftest import cuda_engine
from helpers import (BOUND, FLOAT32_OUTPUT_BOUND, GOLDEN_CASES, golden, int8_bound, int8_rounded_rows,
                     int8_rounded_state_dict, lstm_outputs, normalized_error, random_state_dict, read_safetensors,
                     window_outputs)

HOST = [("ref", "fp64"), ("cpu", "fp32"), ("cpu", "bf16")]


def check_golden(engine_for, case, bound_for):
    model_path, inputs, window, tacana, streaming = golden(case)
    model = hotpath.load(model_path)
    # One engine at a time (closed by `with`): a cuda engine holds a persistent kernel on the GPU.
    with engine_for(model, mode="window", window=window) as w:
        got = w.run(inputs, dtype=np.float64)
        assert got.shape == (len(inputs), model.output_size)
        assert normalized_error(got[window - 1 :], tacana) <= bound_for(w)
        # the backtest (throughput) path: the same truth, two series at once
        both = w.backtest(np.stack([inputs, inputs]), dtype=np.float64)
        assert both.shape == (2, len(inputs), model.output_size)
        for z in both:
            assert normalized_error(z[window - 1 :], tacana) <= bound_for(w)
    with engine_for(model, mode="streaming") as s:
        assert normalized_error(s.run(inputs, dtype=np.float64), streaming) <= bound_for(s)
        assert normalized_error(s.backtest(inputs, dtype=np.float64), streaming) <= bound_for(s)
        # tick by tick through step() gives what run() gives
        s.reset()
        steps = np.array([s.step(x) for x in inputs])
        np.testing.assert_array_equal(steps, s.run(inputs))


@pytest.mark.parametrize("backend,precision", HOST)
@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_golden_host(case, backend, precision):
    check_golden(lambda m, **o: hotpath.Engine(m, backend=backend, precision=precision, **o), case,
                 lambda e: BOUND[e.precision])


@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_golden_ref_float32_output(case):
    """run() in float32 rounds the reference's float64 answer once."""
    check_golden(lambda m, **o: hotpath.Engine(m, backend="ref", **o), case, lambda e: FLOAT32_OUTPUT_BOUND)


@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_golden_cuda(case):
    check_golden(lambda m, **o: cuda_engine(m, **o), case, lambda e: BOUND[e.precision])


def test_golden_cases_present():
    assert set(GOLDEN_CASES) >= {"tiny", "multi_out", "small2x128"}


@pytest.mark.parametrize("bias", [True, False])
def test_state_dict_against_numpy_lstm(rng, bias):
    sd = random_state_dict(rng, I=5, H=12, L=2, O=3, bias=bias)
    x = rng.standard_normal((25, 5)).astype(np.float32)
    model = hotpath.load(sd, window=6)
    ref = hotpath.Engine(model, backend="ref")
    assert normalized_error(ref.run(x, dtype=np.float64), window_outputs(sd, x, 6)) <= BOUND["fp64"]
    ref = hotpath.Engine(model, backend="ref", mode="streaming")
    assert normalized_error(ref.run(x, dtype=np.float64), lstm_outputs(sd, x)) <= BOUND["fp64"]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("mode", ["window", "streaming"])
def test_cpu_against_reference_on_zoo(precision, mode, rng):
    x = rng.standard_normal((3, 120, 32)).astype(np.float32)
    model = hotpath.load("lstm_s")
    ref = hotpath.Engine(model, backend="ref", mode=mode).run(x, dtype=np.float64)
    got = hotpath.Engine(model, backend="cpu", precision=precision, mode=mode).run(x)
    assert normalized_error(got, ref) <= BOUND[precision]


def test_run_batch_against_reference(rng):
    x = rng.standard_normal((5, 50, 32)).astype(np.float32)
    model = hotpath.load("lstm_s")
    ref = hotpath.Engine(model, backend="ref").run_batch(x)
    got = hotpath.Engine(model, backend="cpu", precision="fp32").run_batch(x)
    assert normalized_error(got, ref) <= BOUND["fp32"]
    stream = hotpath.Engine(model, backend="ref", mode="streaming").run(x, dtype=np.float64)[:, -1]
    assert normalized_error(ref, stream) <= FLOAT32_OUTPUT_BOUND


def test_cuda_against_reference_on_zoo(rng):
    model = hotpath.load("lstm_s")
    x = rng.standard_normal((200, 32)).astype(np.float32)
    ref = hotpath.Engine(model, backend="ref", mode="streaming").run(x, dtype=np.float64)
    with cuda_engine(model, mode="streaming") as e:
        assert e.backend == "cuda"
        assert normalized_error(e.run(x), ref) <= BOUND[e.precision]
        e.reset()
        z = np.array([e.step(t) for t in x[:20]])
        assert normalized_error(z, ref[:20]) <= BOUND[e.precision]
        assert isinstance(e.counters(), dict) and e.facts()


# --- int8: cpu precision "int8" against its per-model bound ------------------------------------------


def check_int8(sd, model, x, mode, window=None):
    """The int8 engine's error against the exact float64 reference is within int8's bound, computed from
    the float64 reference on the int8-rounded weights (rounded here in numpy, as quantize.cpp does)."""
    options = {"mode": mode, "window": window}
    exact = hotpath.Engine(model, backend="ref", **options).run(x, dtype=np.float64)
    rounded_model = hotpath.load(int8_rounded_state_dict(sd), lstm_prefix=model.lstm_prefix,
                                 head_prefix=model.head_prefix)
    assert rounded_model.dtype == "F64"  # the rounded weights held exactly
    rounded = hotpath.Engine(rounded_model, backend="ref", **options).run(x, dtype=np.float64)
    rounding = normalized_error(rounded, exact)
    assert rounding > 0  # the rounding moved something: the bound is the model's, not the floor
    with hotpath.Engine(model, backend="cpu", precision="int8", **options) as e:
        assert e.precision == "int8" and "int8" in e.variant
        got = e.run(x, dtype=np.float64)
        assert normalized_error(got, exact) <= int8_bound(rounding), (normalized_error(got, exact), rounding)
        # tick by tick through step() gives what run() gives
        e.reset()
        np.testing.assert_array_equal(np.array([e.step(t) for t in x]), e.run(x))
    return normalized_error(got, exact), rounding


@pytest.mark.parametrize("mode", ["window", "streaming"])
@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_int8_golden_within_its_bound(case, mode):
    model_path, inputs, window, _, _ = golden(case)
    sd, _ = read_safetensors(model_path)
    check_int8(sd, hotpath.load(model_path), inputs, mode, window if mode == "window" else None)


@pytest.mark.parametrize("I,H,L,O,bias,window", [(7, 13, 2, 3, False, 1), (1, 5, 1, 1, True, 4), (9, 33, 3, 2, True, 6)])
def test_int8_odd_shapes_within_its_bound(rng, I, H, L, O, bias, window):
    sd = random_state_dict(rng, I=I, H=H, L=L, O=O, bias=bias)
    x = rng.standard_normal((40, I)).astype(np.float32)
    model = hotpath.load(sd)
    for mode in ("window", "streaming"):
        check_int8(sd, model, x, mode, window if mode == "window" else None)


def test_int8_rounding_rule():
    """The numpy copy of quantize.cpp's rule on the C++ test's own cases (tests/cpu/test_cpu_int8.cpp)."""
    w = np.array([[2.54, -1.0, 0.01], [0.0, 0.0, 0.0], [-0.5, 0.25, 0.125]])
    r = int8_rounded_rows(w)
    scale0 = float(np.float32(2.54 / 127))
    np.testing.assert_array_equal(r[0], np.array([127.0, -50.0, 1.0]) * scale0)  # 0.5 rounds away from zero
    np.testing.assert_array_equal(r[1], 0.0)
    scale2 = float(np.float32(0.5 / 127))
    np.testing.assert_array_equal(r[2], np.array([-127.0, 64.0, 32.0]) * scale2)  # 63.5 -> 64, 31.75 -> 32
