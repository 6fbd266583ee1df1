"""Outputs against the truth: PyTorch's golden cases (tests/data/golden), the engine's float64
reference backend, and an independent float64 numpy LSTM, within the engine's bounds (SPEC §4)."""
import numpy as np
import pytest

import hotpath
from conftest import cuda_engine
from helpers import BOUND, FLOAT32_OUTPUT_BOUND, GOLDEN_CASES, golden, lstm_outputs, normalized_error, random_state_dict, window_outputs

HOST = [("ref", "fp64"), ("cpu", "fp32"), ("cpu", "bf16")]


def check_golden(engine_for, case, bound_for):
    model_path, inputs, window, tacana, streaming = golden(case)
    model = hotpath.load(model_path)
    # One engine at a time (closed by `with`): a cuda engine holds a persistent kernel on the GPU.
    with engine_for(model, mode="window", window=window) as w:
        got = w.run(inputs, dtype=np.float64)
        assert got.shape == (len(inputs), model.output_size)
        assert normalized_error(got[window - 1 :], tacana) <= bound_for(w)
    with engine_for(model, mode="streaming") as s:
        assert normalized_error(s.run(inputs, dtype=np.float64), streaming) <= bound_for(s)
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
