"""hotpath.ray on a local Ray cluster that the tests start and stop on 127.0.0.1 (a head and two worker
nodes, one CPU each): the same answers as a local engine, a worker killed mid-run, bad series among
good ones. Skipped, saying so, where ray is not installed."""
import numpy as np
import pytest

import hotpath

ray = pytest.importorskip("ray", reason="ray is not installed here (pip install ray); the Ray tests run where it is")
import hotpath.ray as hray  # noqa: E402  (after the skip)


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=1)
    c.add_node(num_cpus=1)
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def series_set(rng, n, lengths, I):
    return [rng.standard_normal((lengths[i % len(lengths)], I)).astype(np.float32) for i in range(n)]


@pytest.mark.parametrize("mode", ["window", "streaming"])
def test_same_answers_as_a_local_engine(cluster, mode):
    rng = np.random.default_rng(7)
    model = hotpath.load("lstm_s")
    xs = series_set(rng, 9, [120, 75, 120, 33], model.input_size)
    res = hray.backtest(model, xs, backend="cpu", precision="fp32", mode=mode, workers=3, shard_windows=200)
    assert res.failures == {}
    assert res.shards > 3 and len(res.workers) >= 2
    with hotpath.Engine(model, backend="cpu", precision="fp32", mode=mode) as local:
        for x, got in zip(xs, res.outputs):
            assert got.shape == (x.shape[0], model.output_size)
            assert np.array_equal(got, local.backtest(x)), "not bitwise the local backtest"
    assert res.windows == sum(x.shape[0] for x in xs) and res.windows_per_s > 0
    # method="run": bitwise what a local Engine.run from a reset state gives.
    run = hray.backtest(model, {"a": xs[0], "b": xs[1]}, backend="cpu", precision="fp32", mode=mode, method="run")
    with hotpath.Engine(model, backend="cpu", precision="fp32", mode=mode) as local:
        for k, x in (("a", xs[0]), ("b", xs[1])):
            local.reset()
            assert np.array_equal(run.outputs[k], local.run(x))


def test_a_killed_worker_has_its_shards_rerun_and_each_result_taken_once(cluster):
    rng = np.random.default_rng(8)
    model = hotpath.load("lstm_s")
    xs = series_set(rng, 16, [90], model.input_size)
    res = hray.backtest(
        model, xs, backend="cpu", precision="fp32", mode="streaming", workers=2, shard_windows=90, _kill_a_worker_after=2
    )
    assert res.failures == {}
    assert res.retried_shards >= 1
    assert res.windows == 16 * 90
    with hotpath.Engine(model, backend="cpu", precision="fp32", mode="streaming") as local:
        for x, got in zip(xs, res.outputs):
            assert np.array_equal(got, local.backtest(x))


def test_bad_series_fail_alone_with_hotpaths_message(cluster, capsys):
    rng = np.random.default_rng(9)
    model = hotpath.load("lstm_s")
    good = series_set(rng, 4, [60], model.input_size)
    nan = good[0].copy()
    nan[17, 3] = np.nan
    series = {"g0": good[0], "nan": nan, "g1": good[1], "wide": rng.standard_normal((60, 5)).astype(np.float32),
              "g2": good[2], "empty": np.zeros((0, model.input_size), np.float32)}
    res = hray.backtest(model, series, backend="cpu", precision="fp32", mode="window", shard_windows=500, progress=True)
    err = capsys.readouterr().err
    assert "shards" in err and "windows/s; per worker:" in err and "2 series failed" in err, err
    assert set(res.outputs) == {"g0", "g1", "g2", "empty"}
    assert set(res.failures) == {"nan", "wide"}
    assert res.outputs["empty"].shape == (0, model.output_size)  # an empty series is no error (as locally)
    assert "tick 17" in res.failures["nan"] and "NaN" in res.failures["nan"], res.failures["nan"]
    assert "5" in res.failures["wide"], res.failures["wide"]
    with hotpath.Engine(model, backend="cpu", precision="fp32") as local:
        assert np.array_equal(res.outputs["g1"], local.backtest(good[1]))


def test_bad_arguments_are_refused_before_any_worker_starts(cluster):
    with pytest.raises(TypeError, match="list of"):
        hray.backtest("lstm_s", np.zeros((10, 32), np.float32))
    with pytest.raises(ValueError, match="method"):
        hray.backtest("lstm_s", [np.zeros((10, 32), np.float32)], method="fast")
    with pytest.raises(hotpath.Error):
        hray.backtest("no_such_model_file.safetensors", [np.zeros((10, 32), np.float32)])


def test_the_docs_example_runs(cluster, tmp_path, monkeypatch):
    import contextlib
    import io
    import re

    from helpers import REPO

    block = re.findall(r"```python\n(.*?)```", (REPO / "docs/ray.md").read_text(), re.S)[0]
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "<docs/ray.md>", "exec"), {"__name__": "__example__"})
    lines = out.getvalue().splitlines()
    assert lines[0] == "1000 (500, 1) {}", lines
    assert "windows/s over" in lines[1]


def dataset_of(rng, n, lengths, I):
    xs = series_set(rng, n, lengths, I)
    keys = [f"SYM{i:03d}" for i in range(n)]
    return keys, xs, ray.data.from_items([{"key": k, "series": x} for k, x in zip(keys, xs)])


def test_a_ray_dataset_in_gives_a_ray_dataset_out_in_order(cluster):
    pytest.importorskip("pyarrow", reason="Ray Data needs pyarrow (pip install 'ray[data]')")
    rng = np.random.default_rng(10)
    model = hotpath.load("lstm_s")
    keys, xs, ds = dataset_of(rng, 12, [80, 80, 45], model.input_size)
    res = hray.backtest(model, ds, backend="cpu", precision="fp32", mode="streaming", workers=2, shard_windows=200)
    assert res.failures == {}
    rows = res.outputs.take_all()
    assert [r["key"] for r in rows] == keys, "not in the input's order"
    with hotpath.Engine(model, backend="cpu", precision="fp32", mode="streaming") as local:
        for x, r in zip(xs, rows):
            assert np.array_equal(np.asarray(r["output"]), local.backtest(x)), "not bitwise the local backtest"
    assert res.windows == sum(x.shape[0] for x in xs) and res.windows_per_s > 0
    assert sum(w["windows"] for w in res.workers.values()) == res.windows


def test_a_ray_dataset_with_bad_rows_and_a_worker_crash(cluster, tmp_path):
    pytest.importorskip("pyarrow", reason="Ray Data needs pyarrow (pip install 'ray[data]')")
    rng = np.random.default_rng(11)
    model = hotpath.load("lstm_s")
    xs = series_set(rng, 8, [50], model.input_size)
    xs[3] = xs[3].copy()
    xs[3][9, 0] = np.inf
    keys = [f"k{i}" for i in range(8)]
    ds = ray.data.from_items([{"key": k, "series": x} for k, x in zip(keys, xs)])
    crashed = tmp_path / "crashed"
    res = hray.backtest(model, ds, backend="cpu", precision="fp32", workers=2, shard_windows=100,
                        _crash_a_worker_once=str(crashed))
    assert crashed.exists(), "the test hook did not kill a worker"
    assert set(res.failures) == {"k3"} and "tick 9" in res.failures["k3"], res.failures
    rows = res.outputs.take_all()
    assert [r["key"] for r in rows] == [k for k in keys if k != "k3"], "a row lost or delivered twice"
    with hotpath.Engine(model, backend="cpu", precision="fp32") as local:
        for r in rows:
            assert np.array_equal(np.asarray(r["output"]), local.backtest(xs[int(r["key"][1:])]))


def test_a_ray_dataset_without_the_columns_is_refused(cluster):
    pytest.importorskip("pyarrow", reason="Ray Data needs pyarrow (pip install 'ray[data]')")
    ds = ray.data.from_items([{"name": "a", "x": np.zeros((5, 32), np.float32)}])
    with pytest.raises(ValueError, match="no column 'key'"):
        hray.backtest("lstm_s", ds, backend="cpu")
    with pytest.raises(ValueError, match="needs 1 GPUs but the Ray cluster has 0"):
        hray.backtest("lstm_s", [np.zeros((5, 32), np.float32)], num_gpus=1)


def test_workers_that_cannot_build_their_engine_fail_the_call_with_its_message(cluster):
    # The options reach the engines only on the workers: every one of them fails to start.
    x = np.zeros((10, 32), np.float32)
    with pytest.raises(RuntimeError, match="no hotpath.ray worker could start.*precision fp16") as err:
        hray.backtest("lstm_s", [x, x], backend="cpu", precision="fp16", workers=2)
    assert "\n" not in str(err.value), "not one line"


def test_more_workers_than_fit_start_without_waiting_for_the_rest(cluster):
    # Three CPUs in the cluster, five workers asked: three start, the other two are left out after the
    # grace period instead of holding up the call for ever.
    rng = np.random.default_rng(12)
    model = hotpath.load("lstm_s")
    xs = series_set(rng, 10, [40], model.input_size)
    res = hray.backtest(model, xs, backend="cpu", precision="fp32", workers=5, shard_windows=40, startup_grace_s=2)
    assert res.failures == {} and 1 <= len(res.workers) <= 3
    with hotpath.Engine(model, backend="cpu", precision="fp32") as local:
        for x, got in zip(xs, res.outputs):
            assert np.array_equal(got, local.backtest(x))
