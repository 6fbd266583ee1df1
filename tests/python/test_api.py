"""The package's surface: load() from every source, Model and Engine properties, zoo, backends,
version, the context manager and close()."""
import os
import pathlib

import numpy as np
import pytest

import hotpath
from helpers import GOLDEN, random_state_dict


def test_version_backends_zoo():
    assert hotpath.__version__.count(".") == 2
    assert {"ref", "cpu"} <= set(hotpath.backends())
    zoo = {e["name"]: e for e in hotpath.zoo()}
    assert zoo["lstm_s"]["input_size"] == 32 and zoo["lstm_s"]["hidden_size"] == 128
    assert zoo["lstm_s"]["num_layers"] == 2 and zoo["lstm_s"]["output_size"] == 1 and zoo["lstm_s"]["window"] == 50
    assert all(e["parameter_count"] > 0 for e in zoo.values())
    nv = zoo["nv_large"]
    assert (nv["input_size"], nv["hidden_size"], nv["num_layers"], nv["window"]) == (512, 736, 4, 128)
    assert nv["parameter_count"] == 16699105


def test_load_zoo_file_pathlike_bytes_agree():
    path = GOLDEN / "multi_out.model.safetensors"
    by_path = hotpath.load(str(path), window=20)
    by_pathlike = hotpath.load(path, window=20)
    by_bytes = hotpath.load(path.read_bytes(), window=20)
    by_bytearray = hotpath.load(bytearray(path.read_bytes()), window=20)
    for m in (by_path, by_pathlike, by_bytes, by_bytearray):
        assert (m.input_size, m.hidden_size, m.num_layers, m.output_size, m.window) == (16, 64, 3, 4, 20)
        assert m.lstm_prefix == "lstm." and m.head_prefix == "fc." and m.dtype == "F32"
    assert by_path.name == str(path) and by_bytes.name == "<bytes>"
    x = np.random.default_rng(0).standard_normal((30, 16)).astype(np.float32)
    outs = [hotpath.Engine(m, backend="cpu").run(x) for m in (by_path, by_pathlike, by_bytes, by_bytearray)]
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])
    zoo = hotpath.load("lstm_s")
    assert zoo.name == "lstm_s" and zoo.window == 50 and zoo.parameter_count == 215169
    assert "lstm_s" in repr(zoo)
    assert hotpath.load(zoo) is zoo


def test_to_safetensors_round_trips_exactly():
    # A model with other prefixes and a window: the bytes give back the same model (float64 weights).
    src = hotpath.load(GOLDEN / "multi_out.model.safetensors", window=20)
    data = src.to_safetensors()
    back = hotpath.load(data)
    assert isinstance(data, bytes) and back.dtype == "F64"
    assert (back.input_size, back.hidden_size, back.num_layers, back.output_size, back.window) == (16, 64, 3, 4, 20)
    assert (back.lstm_prefix, back.head_prefix) == (src.lstm_prefix, src.head_prefix)
    x = np.random.default_rng(1).standard_normal((40, 16)).astype(np.float32)
    for backend, precision in (("ref", None), ("cpu", "fp32"), ("cpu", "bf16")):
        a = hotpath.Engine(src, backend=backend, precision=precision).backtest(x)
        b = hotpath.Engine(back, backend=backend, precision=precision).backtest(x)
        np.testing.assert_array_equal(a, b)


def test_load_without_window_then_engine_needs_one():
    m = hotpath.load(GOLDEN / "tiny.model.safetensors")  # no __metadata__: no window
    assert m.window is None
    with pytest.raises(hotpath.Error, match="window"):
        hotpath.Engine(m, backend="cpu", mode="window")
    assert hotpath.Engine(m, backend="cpu", window=5).window == 5
    assert hotpath.Engine(m, backend="cpu", mode="streaming").window == 1


def test_load_state_dict_with_prefixes(rng):
    sd = random_state_dict(rng, 3, 6, 2, 2, lstm="encoder.rnn.", head="head.")
    m = hotpath.load(sd, window=4)
    assert (m.input_size, m.hidden_size, m.num_layers, m.output_size, m.window) == (3, 6, 2, 2, 4)
    assert m.lstm_prefix == "encoder.rnn." and m.head_prefix == "head." and m.name == "<state_dict>"
    m64 = hotpath.load({k: v.astype(np.float64) for k, v in sd.items()})
    assert m64.dtype == "F64"


def test_engine_properties_and_counters():
    with hotpath.Engine("lstm_s", backend="cpu", precision="fp32") as e:
        assert (e.backend, e.precision, e.mode, e.window) == ("cpu", "fp32", "window", 50)
        assert (e.input_size, e.output_size, e.ticks) == (32, 1, 0)
        assert e.variant and not e.closed and e.choice_note == ""
        assert e.scaler == "none"  # lstm_s carries no input scaler
        assert e.model.name == "lstm_s"
        assert isinstance(e.facts(), dict) and all(isinstance(v, str) for v in e.facts().values())
        assert isinstance(e.counters(), dict) and all(isinstance(v, float) for v in e.counters().values())
        z = e.step(np.zeros(32, np.float32))
        assert z.shape == (1,) and z.dtype == np.float32 and e.ticks == 1
        e.reset()
        assert e.ticks == 0
        assert "cpu" in repr(e)
    assert e.closed and "closed" in repr(e)


def test_auto_backend_is_served():
    with hotpath.Engine("lstm_s") as e:  # on a GPU machine: a cuda engine, closed before the next test
        assert e.backend in hotpath.backends()
        if e.backend == "cpu" and "cuda" in hotpath.backends():
            assert e.choice_note  # auto says why it did not take the GPU


def test_step_out_writes_in_place():
    e = hotpath.Engine("vollo_tiny", backend="cpu", mode="streaming")
    x = np.random.default_rng(1).standard_normal(128).astype(np.float32)
    out = np.full(32, np.nan, np.float32)
    assert e.step(x, out=out) is out
    e.reset()
    np.testing.assert_array_equal(e.step(x), out)


def test_run_shapes_and_state():
    e = hotpath.Engine("lstm_s", backend="cpu", mode="streaming")
    rng = np.random.default_rng(2)
    series = rng.standard_normal((3, 20, 32)).astype(np.float32)
    one = e.run(series[0])
    assert one.shape == (20, 1) and one.dtype == np.float32 and e.ticks == 20
    many = e.run(series)
    assert many.shape == (3, 20, 1)
    # every series from a fresh state: the same as running each alone
    for s in range(3):
        np.testing.assert_array_equal(many[s], e.run(series[s]))
    # run starts fresh even after steps, and leaves the state after its last tick for step()
    e.reset()
    for t in range(5):
        e.step(series[1, t])
    np.testing.assert_array_equal(e.run(series[0, :10]), one[:10])
    z_next = e.step(series[0, 10])
    np.testing.assert_array_equal(z_next, one[10])
    assert e.run(np.zeros((0, 32), np.float32)).shape == (0, 1)
    assert e.run(np.zeros((2, 0, 32), np.float32)).shape == (2, 0, 1)
    assert e.run(series[0], dtype=np.float64).dtype == np.float64


def test_run_batch_matches_fresh_windows():
    e = hotpath.Engine("lstm_s", backend="cpu", mode="streaming")
    x = np.random.default_rng(3).standard_normal((4, 7, 32)).astype(np.float32)
    e.step(x[0, 0])
    got = e.run_batch(x)
    assert got.shape == (4, 1) and e.ticks == 1  # step/run state untouched
    for b in range(4):
        np.testing.assert_allclose(got[b], e.run(x[b])[-1], rtol=0, atol=1e-5)


def test_cpuset_string_and_list():
    cores = sorted(os.sched_getaffinity(0))
    for cpuset in (str(cores[0]), [cores[0]]):
        e = hotpath.Engine("lstm_s", backend="cpu", cpuset=cpuset)
        assert e.facts()["cpu_critical_core"] == str(cores[0])
        e.close()
    assert os.sched_getaffinity(0) == set(cores)  # the pin is undone when the engine goes


def test_engine_keeps_its_model_object():
    m = hotpath.load("lstm_s")
    e = hotpath.Engine(m, backend="cpu")
    assert e.model is m
    e.close()
    assert e.model is m  # still there after close()
    with pytest.raises(TypeError):
        hotpath.Model()


def test_close_is_idempotent_and_final():
    e = hotpath.Engine("lstm_s", backend="cpu")
    e.close()
    e.close()
    for use in (lambda: e.step(np.zeros(32, np.float32)), lambda: e.run(np.zeros((2, 32))), e.reset, e.counters,
                e.facts, lambda: e.ticks, lambda: e.backend, lambda: e.run_batch(np.zeros((1, 2, 32)))):
        with pytest.raises(hotpath.Error, match="closed"):
            use()


def test_error_hierarchy():
    assert issubclass(hotpath.Error, ValueError)
    assert issubclass(hotpath.TickError, hotpath.Error) and issubclass(hotpath.UnsupportedError, hotpath.Error)
    assert hotpath.Error.__module__ == "hotpath"


def test_sources_without_the_module_say_so(tmp_path):
    import subprocess
    import sys

    from helpers import REPO

    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    r = subprocess.run([sys.executable, "-c", "import hotpath"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode != 0 and "compiled module is missing" in r.stderr


def test_engine_is_warmed_unless_warm_false(rng):
    """An engine is warmed on creation (synthetic ticks, then a reset: its ticks are not the caller's);
    warm=False skips it. Either way the answers are the same, bit for bit."""
    x = rng.standard_normal((80, 32)).astype(np.float32)
    outputs = []
    for warm in (True, False):
        with hotpath.Engine("lstm_s", backend="cpu", mode="window", warm=warm) as e:
            w = e.warm_up
            if warm:
                assert w["ticks"] >= 64 and w["seconds"] > 0  # max(64, W + 1) ticks (engine/warm.hpp)
            else:
                assert w == {"ticks": 0, "seconds": 0.0}
            assert e.ticks == 0 and e.counters() == hotpath.Engine("lstm_s", backend="cpu", warm=False).counters()
            outputs.append(e.run(x))
    np.testing.assert_array_equal(outputs[0], outputs[1])
    with pytest.raises(TypeError):
        hotpath.Engine("lstm_s", backend="cpu", warm="no")


def test_backtest_shapes_dtype_and_state():
    rng = np.random.default_rng(5)
    series = rng.standard_normal((3, 20, 32)).astype(np.float32)
    for backend in ("ref", "cpu"):
        # ref is exact: a series in [S, T, I] is bit for bit the series alone; a backend's throughput path
        # may order its arithmetic differently from step() and is held to its fp32 bound instead.
        same = np.testing.assert_array_equal if backend == "ref" else (
            lambda a, b: np.testing.assert_allclose(a, b, rtol=0, atol=1e-5))
        for mode in ("window", "streaming"):
            e = hotpath.Engine("lstm_s", backend=backend, mode=mode, window=6)
            many = e.backtest(series)
            assert many.shape == (3, 20, 1) and many.dtype == np.float32
            # every series from zero state: what run() gives for it alone, and [T, I] gives [T, O]
            for s in range(3):
                one = e.backtest(series[s])
                assert one.shape == (20, 1)
                same(one, many[s])
                same(one, e.run(series[s]))
            assert not np.array_equal(many[0], many[1])
            # from zero state even after steps, and the engine left reset: the next step is t = 0
            e.reset()
            for t in range(5):
                e.step(series[1, t])
            same(e.backtest(series[0]), many[0])
            assert e.ticks == 0
            same(e.step(series[2, 0]), many[2, 0])
            wide = e.backtest(series, dtype=np.float64)
            assert wide.dtype == np.float64 and wide.shape == (3, 20, 1)
            same(wide.astype(np.float32), many)
            e.close()


def test_backtest_converts_any_input_layout():
    e = hotpath.Engine("lstm_s", backend="ref", mode="streaming")
    rng = np.random.default_rng(6)
    base = rng.standard_normal((2, 12, 32))
    expected = e.backtest(base.astype(np.float32))
    # float64, Fortran order, a strided view, a list: converted to float32 C order once, same outputs
    np.testing.assert_array_equal(e.backtest(base), expected)
    np.testing.assert_array_equal(e.backtest(np.asfortranarray(base.astype(np.float32))), expected)
    wider = np.zeros((2, 12, 64), np.float32)
    wider[:, :, ::2] = base
    np.testing.assert_array_equal(e.backtest(wider[:, :, ::2]), expected)
    np.testing.assert_array_equal(e.backtest(base[0].tolist()), expected[0])
    # nothing to run: empty outputs of the right shape, and the engine still left reset
    e.step(base[0, 0])
    assert e.backtest(np.zeros((0, 32), np.float32)).shape == (0, 1)
    assert e.backtest(np.zeros((2, 0, 32), np.float32)).shape == (2, 0, 1)
    assert e.backtest(np.zeros((0, 5, 32), np.float32), dtype="float64").shape == (0, 5, 1)
    assert e.ticks == 0
