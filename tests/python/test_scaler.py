"""Input scaling through Python: Engine(scaler="none" | "model" | "rolling:N"), its default
(the model's scaler when the file carries one), engine.scaler, outputs against a direct numpy computation
of the scaled series fed to an independent float64 LSTM, and causality (no output depends on a later
input)."""
import numpy as np
import pytest

import hotpath
from helpers import BOUND, lstm_outputs, normalized_error, random_state_dict, rolling_scaled, window_outputs

I = 5


@pytest.fixture
def sd(rng):
    return random_state_dict(rng, I=I, H=11, L=2, O=2)


def make_series(rng, level=50.0, spread=1.0):
    """Features of different kinds: standard, one at `level` with `spread`, a constant (no spread: scale
    1), a trending one."""
    T = 60
    x = rng.standard_normal((T, I))
    x[:, 1] = level + spread * x[:, 1]
    x[:, 2] = 3.25
    x[:, 3] = np.linspace(-2, 5, T) + 0.1 * x[:, 3]
    return x.astype(np.float32)


@pytest.fixture
def series(rng):
    return make_series(rng)


def test_default_scaler_is_the_models(sd):
    assert hotpath.Engine(hotpath.load(sd), backend="cpu", mode="streaming").scaler == "none"
    scaled = dict(sd, **{"input_scaler.mean": np.arange(I, dtype=np.float32),
                         "input_scaler.scale": np.full(I, 2.0, np.float32)})
    m = hotpath.load(scaled)
    assert hotpath.Engine(m, backend="cpu", mode="streaming").scaler == "model"
    assert hotpath.Engine(m, backend="cpu", mode="streaming", scaler="none").scaler == "none"
    assert hotpath.Engine(m, backend="cpu", mode="streaming", scaler="rolling:100").scaler == "rolling:100"


def test_model_scaler_against_numpy(sd, series):
    mean = np.array([0.5, 50.0, 3.0, 1.0, -0.25], np.float32)
    scale = np.array([2.0, 0.75, 1.0, 3.0, 0.5], np.float32)
    m = hotpath.load(dict(sd, **{"input_scaler.mean": mean, "input_scaler.scale": scale}))
    scaled = (series.astype(np.float64) - mean) * (1.0 / scale.astype(np.float64))
    truth = lstm_outputs(sd, scaled)
    assert normalized_error(hotpath.Engine(m, backend="ref", mode="streaming").run(series, dtype=np.float64),
                            truth) <= BOUND["fp64"]
    assert normalized_error(hotpath.Engine(m, backend="cpu", mode="streaming").run(series), truth) <= BOUND["fp32"]
    # "none" on the same model: the raw inputs
    raw = hotpath.Engine(m, backend="ref", mode="streaming", scaler="none").run(series, dtype=np.float64)
    assert normalized_error(raw, lstm_outputs(sd, series)) <= BOUND["fp64"]


@pytest.mark.parametrize("n", [2, 7, 100])
@pytest.mark.parametrize("mode", ["streaming", "window"])
def test_rolling_against_numpy(sd, series, n, mode):
    """The engine's rolling:n against the numpy computation of the scaled series (helpers.rolling_scaled)
    fed to the float64 numpy LSTM: ref within fp64's bound, cpu within fp32's. n = 7 wraps the ring
    many times over 60 ticks; n = 100 never fills it."""
    scaled = rolling_scaled(series, n)
    truth = lstm_outputs(sd, scaled) if mode == "streaming" else window_outputs(sd, scaled, 6)
    model = hotpath.load(sd)
    options = {"mode": mode, "window": 6 if mode == "window" else None, "scaler": f"rolling:{n}"}
    with hotpath.Engine(model, backend="ref", **options) as ref:
        assert ref.scaler == f"rolling:{n}"
        assert normalized_error(ref.run(series, dtype=np.float64), truth) <= BOUND["fp64"]
        # step by step, the same; a reset forgets the history
        ref.reset()
        steps = np.array([ref.step(x) for x in series])
        np.testing.assert_array_equal(steps, ref.run(series))
    with hotpath.Engine(model, backend="cpu", precision="fp32", **options) as cpu:
        assert normalized_error(cpu.run(series), truth) <= BOUND["fp32"]
    # without the scaler the answers are another series altogether
    assert normalized_error(hotpath.Engine(model, backend="ref", mode=mode, window=options["window"],
                                           scaler="none").run(series, dtype=np.float64), truth) > 1e-3


def test_rolling_on_a_high_level_feature(sd, rng):
    """A feature at 1e4 with a spread of 0.01 (float32's spacing there is 1e-3): the statistics and the
    scaling are float64 on every path (the float paths round the scaled value once), so the reference
    stays exact and cpu within fp32's bound (a float32 shift cost 5e-4 here)."""
    series = make_series(rng, level=1e4, spread=0.01)
    truth = lstm_outputs(sd, rolling_scaled(series, 7))
    got = hotpath.Engine(hotpath.load(sd), backend="ref", mode="streaming", scaler="rolling:7").run(series, dtype=np.float64)
    assert normalized_error(got, truth) <= BOUND["fp64"]
    cpu = hotpath.Engine(hotpath.load(sd), backend="cpu", precision="fp32", mode="streaming", scaler="rolling:7")
    assert normalized_error(cpu.run(series), truth) <= BOUND["fp32"]


@pytest.mark.parametrize("backend,precision", [("ref", None), ("cpu", "fp32"), ("cpu", "int8")])
def test_rolling_does_not_leak_the_future(sd, series, rng, backend, precision):
    """Every input after tick t changed: the outputs up to t stay bit-identical (and later ones move)."""
    t = 23
    changed = series.copy()
    changed[t + 1 :] = rng.standard_normal(changed[t + 1 :].shape).astype(np.float32) * 50
    with hotpath.Engine(hotpath.load(sd), backend=backend, precision=precision, mode="streaming",
                        scaler="rolling:5") as e:
        before, after = e.run(series), e.run(changed)
    np.testing.assert_array_equal(before[: t + 1], after[: t + 1])
    assert not np.array_equal(before[t + 1 :], after[t + 1 :])


def test_rolling_needs_a_tick_stream(sd):
    e = hotpath.Engine(hotpath.load(sd), backend="cpu", window=4, scaler="rolling:10")
    with pytest.raises(hotpath.Error, match="needs a tick stream") as err:
        e.run_batch(np.zeros((2, 4, I), np.float32))
    assert "\n" not in str(err.value)
    # a fixed scaler serves batches
    fixed = hotpath.Engine(hotpath.load(sd), backend="cpu", window=4, scaler="none")
    assert fixed.run_batch(np.zeros((2, 4, I), np.float32)).shape == (2, 2)


@pytest.mark.parametrize("text", ["bogus", "", "rolling", "rolling:", "rolling:x5", "Model", " none"])
def test_bad_scaler_is_the_clis_line(text):
    """The message `hotpath run --scaler TEXT` prints after "hotpath: error: " (src/scaling's one rule)."""
    with pytest.raises(hotpath.Error) as e:
        hotpath.Engine("lstm_s", backend="cpu", scaler=text)
    assert str(e.value) == f"unknown scaler '{text}' (expected none, model or rolling:N with N in 2..1000000)"


@pytest.mark.parametrize("text,bound", [("rolling:1", ">= 2 (fewer ticks have no spread)"), ("rolling:0", ">= 2 (fewer ticks have no spread)"),
                                        ("rolling:1000001", "<= 1000000")])
def test_rolling_n_out_of_range_names_the_bound(text, bound):
    """A rolling scaler with a bad N is not an "unknown scaler": the message says which bound N breaks."""
    with pytest.raises(hotpath.Error) as e:
        hotpath.Engine("lstm_s", backend="cpu", scaler=text)
    assert str(e.value) == f"scaler '{text}': N must be {bound} (rolling:N with N in 2..1000000)"


def test_model_scaler_on_a_model_without_one():
    with pytest.raises(hotpath.Error, match=r"^scaler model: the model 'lstm_s' carries no input scaler") as e:
        hotpath.Engine("lstm_s", backend="cpu", scaler="model")
    assert "\n" not in str(e.value)
    with pytest.raises(TypeError):
        hotpath.Engine("lstm_s", backend="cpu", scaler=5)
