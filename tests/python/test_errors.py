"""Bad input of every kind: a Python exception with the CLI's one-line message, never a crash; a
refused tick leaves the state as it was."""
import numpy as np
import pytest

import hotpath
from helpers import GOLDEN


def one_line(e):
    text = str(e.value)
    assert text and "\n" not in text
    return text


@pytest.fixture
def engine():
    e = hotpath.Engine("lstm_s", backend="cpu", mode="streaming")
    yield e
    e.close()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_tick_is_refused_and_state_unchanged(engine, bad):
    rng = np.random.default_rng(4)
    xs = rng.standard_normal((6, 32)).astype(np.float32)
    expected = engine.run(xs)
    engine.reset()
    for t in range(3):
        engine.step(xs[t])
    poisoned = xs[3].copy()
    poisoned[7] = bad
    with pytest.raises(hotpath.TickError) as e:
        engine.step(poisoned)
    assert "tick 3" in one_line(e) and "value 7" in one_line(e)
    assert engine.ticks == 3
    for t in range(3, 6):
        np.testing.assert_array_equal(engine.step(xs[t]), expected[t])


def test_bad_tick_in_a_series_is_named(engine):
    xs = np.zeros((2, 5, 32), np.float32)
    xs[1, 4, 0] = np.nan
    with pytest.raises(hotpath.TickError, match=r"^series 1: tick 4: input value 0 is NaN") as e:
        engine.run(xs)
    one_line(e)
    with pytest.raises(hotpath.TickError, match=r"^tick 4: input value 0 is NaN"):
        engine.run(xs[1])


@pytest.mark.parametrize("shape", [(31,), (33,), (0,), (1, 32), ()])
def test_step_wrong_shape(engine, shape):
    with pytest.raises(hotpath.TickError) as e:
        engine.step(np.zeros(shape, np.float32))
    assert "32" in one_line(e)
    assert engine.ticks == 0


@pytest.mark.parametrize("shape", [(5,), (5, 31), (2, 5, 33), (1, 2, 3, 32)])
def test_run_wrong_shape(engine, shape):
    with pytest.raises(hotpath.Error, match=r"run takes a series of shape \(T, 32\)") as e:
        engine.run(np.zeros(shape, np.float32))
    one_line(e)


@pytest.mark.parametrize("shape", [(5, 32), (2, 5, 31), (2, 0, 32)])
def test_run_batch_wrong_shape(engine, shape):
    with pytest.raises(hotpath.Error) as e:
        engine.run_batch(np.zeros(shape, np.float32))
    one_line(e)


@pytest.mark.parametrize("out", [np.zeros(2, np.float32), np.zeros(1, np.float64), np.zeros((1, 1), np.float32),
                                 np.zeros(1, ">f4"), [0.0]])
def test_step_bad_out(engine, out):
    with pytest.raises(hotpath.Error, match=r"out must be a writable float32 C-contiguous array of shape \(1,\)"):
        engine.step(np.zeros(32, np.float32), out=out)
    assert engine.ticks == 0


def test_step_strided_out_is_refused():
    e = hotpath.Engine("vollo_tiny", backend="cpu")
    with pytest.raises(hotpath.Error, match=r"of shape \(32,\)"):
        e.step(np.zeros(128, np.float32), out=np.zeros(64, np.float32)[::2])


def test_step_read_only_out(engine):
    out = np.zeros(1, np.float32)
    out.flags.writeable = False
    with pytest.raises(hotpath.Error, match="out must be a writable"):
        engine.step(np.zeros(32, np.float32), out=out)


def test_not_numbers(engine):
    with pytest.raises((ValueError, TypeError)):
        engine.step(["a"] * 32)
    with pytest.raises(TypeError):
        engine.step(None)
    with pytest.raises(hotpath.Error, match="dtype must be float32 or float64"):
        engine.run(np.zeros((2, 32)), dtype=np.int32)


@pytest.mark.parametrize("options,message", [
    ({"backend": "tpu"}, "unknown backend 'tpu'"),
    ({"precision": "fp8"}, "unknown precision 'fp8'"),
    ({"mode": "sideways"}, "unknown mode 'sideways'"),
    ({"window": 0}, "window 0 is outside 1..10000"),
    ({"window": 10001}, "window 10001 is outside 1..10000"),
    ({"cpuset": "2-x"}, "cpuset"),
    ({"cpuset": [0, 0]}, "twice"),
    ({"cpuset": [-1]}, "cpuset"),
    ({"cpuset": 3.5}, "cpuset"),
    ({"backend": "ref", "variant": "fast"}, "variant"),
    ({"kernel": "bogus"}, r"^unknown cuda kernel 'bogus' \(valid: auto"),
    ({"backend": "ref", "kernel": "grid"}, "kernel"),
    ({"fallback": "gpu"}, r"^unknown fallback 'gpu' \(valid: none or cpu\)$"),
    ({"variant": "warp"}, r"^unknown cuda variant 'warp' \(valid: auto, smem or regs\)$"),
    ({"backend": "cpu", "precision": "fp16"}, "fp16"),
    ({"scaler": "rolling:1"}, r"^scaler 'rolling:1': N must be >= 2 \(fewer ticks have no spread\) \(rolling:N with N in 2..1000000\)$"),
    ({"scaler": "model"}, "carries no input scaler"),
    ({"backend": "ref", "precision": "int8"}, "int8"),
])
def test_bad_engine_options(options, message):
    options = {"backend": "cpu", **options}  # auto might take the GPU, whose options differ
    with pytest.raises(hotpath.Error, match=message) as e:
        hotpath.Engine("lstm_s", **options)
    one_line(e)


def test_unknown_kernel_is_refused_before_the_device():
    # For cuda too: a bad name is the caller's mistake (hotpath.Error), not "no usable CUDA device".
    with pytest.raises(hotpath.Error, match=r"unknown cuda kernel 'warp' \(valid: auto") as e:
        hotpath.Engine("lstm_s", backend="cuda", kernel="warp")
    assert not isinstance(e.value, hotpath.UnsupportedError)
    one_line(e)
    e = hotpath.Engine("lstm_s", backend="cpu", kernel="auto")  # the default, whatever the backend
    assert e.backend == "cpu"
    e.close()


def test_batch_rows_is_cudas_and_range_checked_before_the_device():
    # batch_rows (cuda's chunk size for backtests and run_batch): out of range is the caller's mistake,
    # named before any device is looked for; a cpu or ref backend has no chunks.
    for bad in (-1, 70000):
        with pytest.raises(hotpath.Error, match=rf"batch rows {bad} is outside 1\.\.65536") as e:
            hotpath.Engine("lstm_s", backend="cuda", batch_rows=bad)
        assert not isinstance(e.value, hotpath.UnsupportedError)
        one_line(e)
    for backend in ("cpu", "ref"):
        with pytest.raises(hotpath.Error, match=rf"backend {backend} has no batch chunks \(--batch-rows 4096") as e:
            hotpath.Engine("lstm_s", backend=backend, batch_rows=4096)
        one_line(e)


def test_unavailable_backend_is_unsupported():
    if "cuda" in hotpath.backends():
        pytest.skip("built with CUDA: covered by the GPU tests")
    with pytest.raises(hotpath.UnsupportedError, match="without CUDA") as e:
        hotpath.Engine("lstm_s", backend="cuda")
    one_line(e)


def test_hybrid_is_named_and_refused_without_what_it_needs():
    # built where cuda is; the cpu's precisions only, checked before any GPU is looked for
    assert ("hybrid" in hotpath.backends()) == ("cuda" in hotpath.backends())
    with pytest.raises(hotpath.UnsupportedError, match="fp16") as e:
        hotpath.Engine("lstm_s", backend="hybrid", precision="fp16")
    one_line(e)
    if "cuda" not in hotpath.backends():
        with pytest.raises(hotpath.UnsupportedError, match="without CUDA") as e:
            hotpath.Engine("lstm_s", backend="hybrid")
        one_line(e)


def test_bad_model_sources(tmp_path):
    with pytest.raises(hotpath.Error, match="no_such_model") as e:
        hotpath.load("no_such_model")
    one_line(e)
    with pytest.raises(hotpath.Error) as e:
        hotpath.load(tmp_path / "missing.safetensors")
    one_line(e)
    with pytest.raises(TypeError, match="hotpath.load"):
        hotpath.load(42)
    with pytest.raises(hotpath.Error, match="window"):
        hotpath.load("lstm_s", window=0)
    with pytest.raises(hotpath.Error):
        hotpath.load(hotpath.load("lstm_s"), window=3)


def test_corrupt_bytes():
    good = (GOLDEN / "tiny.model.safetensors").read_bytes()
    for bad in (b"", b"\x00" * 7, good[:100], good[: len(good) - 1], b"\xff" * 8 + good[8:],
                good[:8] + b"[" + good[9:], good.replace(b'"F32"', b'"I32"', 1)):
        with pytest.raises(hotpath.Error) as e:
            hotpath.load(bad)
        one_line(e)


def test_corrupt_file(tmp_path):
    path = tmp_path / "broken.safetensors"
    path.write_bytes((GOLDEN / "tiny.model.safetensors").read_bytes()[:64])
    with pytest.raises(hotpath.Error, match="broken.safetensors") as e:
        hotpath.load(path)
    one_line(e)


def test_wrong_prefix():
    with pytest.raises(hotpath.Error, match="nope") as e:
        hotpath.load(GOLDEN / "tiny.model.safetensors", lstm_prefix="nope.")
    one_line(e)


def test_non_finite_weights():
    from helpers import random_state_dict

    sd = random_state_dict(np.random.default_rng(0), 2, 3, 1, 1)
    sd["fc.weight"][0, 1] = np.nan
    with pytest.raises(hotpath.Error, match="NaN") as e:
        hotpath.load(sd)
    one_line(e)


def test_backend_error_is_a_runtime_failure_not_bad_input():
    # A GPU answer past its deadline or a stopped kernel (C++ hotpath::BackendError) is raised as
    # hotpath.BackendError: still a hotpath.Error, and a RuntimeError, so callers can tell it from bad input.
    assert issubclass(hotpath.BackendError, hotpath.Error)
    assert issubclass(hotpath.BackendError, RuntimeError)
    assert not issubclass(hotpath.TickError, RuntimeError)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_backtest_names_the_first_bad_input_before_running(engine, bad):
    xs = np.zeros((3, 5, 32), np.float32)
    xs[1, 4, 7] = bad
    xs[2, 0, 0] = np.nan  # later: not the one named
    for t in range(2):
        engine.step(xs[0, t])
    with pytest.raises(hotpath.TickError, match=r"series 1, tick 4, input 7 is (NaN|Inf); nothing was computed") as e:
        engine.backtest(xs)
    one_line(e)
    with pytest.raises(hotpath.TickError, match=r"series 0, tick 4, input 7"):
        engine.backtest(xs[1])
    assert engine.ticks == 2  # refused before anything ran


@pytest.mark.parametrize("shape", [(5,), (5, 31), (2, 5, 33), (1, 2, 3, 32), ()])
def test_backtest_wrong_shape(engine, shape):
    with pytest.raises(hotpath.Error, match=r"backtest takes a series of shape \(T, 32\) or series of shape \(S, T, 32\)") as e:
        engine.backtest(np.zeros(shape, np.float32))
    one_line(e)


def test_backtest_wrong_dtype(engine):
    with pytest.raises(hotpath.Error, match=r"^backtest: dtype must be float32 or float64") as e:
        engine.backtest(np.zeros((2, 32)), dtype=np.int32)
    one_line(e)


# --- messages that name the argument -------------------------------------------------------------


def test_misspelt_engine_keyword_is_named():
    with pytest.raises(TypeError) as e:
        hotpath.Engine("lstm_s", backend="cpu", precison="bf16")
    assert str(e.value) == "Engine() got an unknown keyword argument 'precison' (did you mean 'precision'?)"
    with pytest.raises(TypeError) as e:
        hotpath.Engine("lstm_s", backend="cpu", colour="red")
    assert str(e.value) == "Engine() got an unknown keyword argument 'colour'"



def test_misspelt_instances_keyword_is_named():
    # Refused before the model is loaded or a device asked for: the same on a machine without a GPU.
    with pytest.raises(TypeError) as e:
        hotpath.Instances("lstm_s", 2, isolaton="shared")
    assert str(e.value) == "Instances() got an unknown keyword argument 'isolaton' (did you mean 'isolation'?)"
    with pytest.raises(TypeError) as e:
        hotpath.Instances("lstm_s", 2, backend="cuda", smseach=4)
    assert str(e.value) == "Instances() got an unknown keyword argument 'smseach' (did you mean 'sms_each'?)"
    with pytest.raises(TypeError) as e:
        hotpath.Instances("lstm_s", 2, colour="red")
    assert str(e.value) == "Instances() got an unknown keyword argument 'colour'"


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda e, x: e.run(x, dtpye=np.float64), "run() got an unknown keyword argument 'dtpye' (did you mean 'dtype'?)"),
        (lambda e, x: e.backtest(x, progres=False), "backtest() got an unknown keyword argument 'progres' (did you mean 'progress'?)"),
        (lambda e, x: e.run_batch(x[None], progess=False), "run_batch() got an unknown keyword argument 'progess' (did you mean 'progress'?)"),
        (lambda e, x: e.run(x, colour="red"), "run() got an unknown keyword argument 'colour'"),
    ],
)
def test_misspelt_engine_method_keyword_is_named(engine, call, message):
    with pytest.raises(TypeError) as e:
        call(engine, np.zeros((3, 32), np.float32))
    assert str(e.value) == message


def test_misspelt_load_keyword_is_named():
    with pytest.raises(TypeError) as e:
        hotpath.load("lstm_s", windw=10)
    assert str(e.value) == "load() got an unknown keyword argument 'windw' (did you mean 'window'?)"
    with pytest.raises(TypeError) as e:
        hotpath.load("lstm_s", lstm_prefx="rnn.")
    assert str(e.value) == "load() got an unknown keyword argument 'lstm_prefx' (did you mean 'lstm_prefix'?)"
    assert hotpath.load("lstm_s", window=10).window == 10  # the right keywords still pass through


def test_misspelt_ray_backtest_keyword_is_named():
    import hotpath.ray  # needs no ray until a backtest starts; the keywords are checked first

    with pytest.raises(TypeError) as e:
        hotpath.ray.backtest("lstm_s", [np.zeros((3, 32), np.float32)], workrs=2)
    assert str(e.value) == "backtest() got an unknown keyword argument 'workrs' (did you mean 'workers'?)"

def test_none_names_the_argument():
    e = hotpath.Engine("lstm_s", backend="cpu")
    with pytest.raises(TypeError) as err:
        e.step(None)
    assert str(err.value) == f"step: x is None; pass one tick, an array of {e.model.input_size} numbers"
    for method in (e.run, e.backtest):
        with pytest.raises(TypeError) as err:
            method(None)
        assert str(err.value) == f"{method.__name__}: series is None, expected an array of numbers"


def test_beyond_float32_is_not_called_inf():
    e = hotpath.Engine("lstm_s", backend="cpu")
    I = e.model.input_size
    x = np.zeros(I)
    x[2] = 1e300
    for tick in (x, list(x)):
        with pytest.raises(hotpath.TickError) as err:
            e.step(tick)
        assert str(err.value) == f"step: x [2] is {1e300:.17g}, beyond float32's range (the engine computes in float32)"
    series = np.zeros((5, I))
    series[3, 1] = -1e39
    with pytest.raises(hotpath.Error) as err:
        e.run(series)
    assert str(err.value).startswith(f"run: series [3, 1] is {-1e39:.17g}, beyond float32's range")
    # A real infinity is still called one; float64 within range still runs.
    x[2] = np.inf
    with pytest.raises(hotpath.TickError, match="is Inf"):
        e.step(x)
    x[2] = 3e38
    assert np.isfinite(e.step(x)).all()
