"""hotpath.Instances (docs/python.md, "Many instances on one GPU"): many instances of one model on one
GPU, each an Engine. Bad options are refused by name before any device is asked; on a GPU every instance,
driven from its own thread, answers its own series within the fp16 bound (docs/model.md), and a restart
leaves the others serving and the old handle refusing. Without a GPU the GPU part skips, saying so."""
import threading

import numpy as np
import pytest

import hotpath
from helpers import BOUND, golden, normalized_error


def test_bad_options_are_refused_by_name():
    with pytest.raises(hotpath.Error, match="need the cuda backend"):
        hotpath.Instances("lstm_s", 2, backend="cpu")
    with pytest.raises(hotpath.Error, match="unknown isolation 'mps'"):
        hotpath.Instances("lstm_s", 2, isolation="mps")
    with pytest.raises(hotpath.Error, match="unknown placement 'gpc'"):
        hotpath.Instances("lstm_s", 2, isolation="shared", placement="gpc")
    with pytest.raises(hotpath.Error, match="at least 1"):
        hotpath.Instances("lstm_s", 0)
    for bad in (hotpath.Error, hotpath.UnsupportedError):
        assert issubclass(bad, hotpath.Error)


def open_instances(model, count, **options):
    """An instance set, or a skip saying why there is none (no CUDA build, no device)."""
    if "cuda" not in hotpath.backends():
        pytest.skip("no GPU test: this hotpath was built without CUDA")
    try:
        return hotpath.Instances(model, count, **options)
    except hotpath.UnsupportedError as e:
        if "already runs" in str(e):  # a leak in the tests must fail, not skip
            raise
        pytest.skip(f"no GPU test: {e}")


@pytest.mark.parametrize("isolation", ["green", "shared"])
def test_instances_answer_each_their_own_series(isolation):
    path, x, window, expected, _ = golden("small2x128")
    with open_instances(str(path), 4, isolation=isolation, window=window) as instances:
        assert len(instances) == 4 and instances.layout["isolation"] == isolation
        outs = [None] * 4
        failures = []

        def drive(k):
            # 11k ticks of the instance's own constant input first: the instances see different inputs at
            # any moment, and from the golden series' first full window on each one's outputs are the
            # golden ones only if no other instance's state reached it.
            try:
                e = instances[k]
                for _ in range(11 * k):
                    e.step(np.full(x.shape[1], 0.1 * (k + 1), np.float32))
                outs[k] = np.stack([e.step(x[t]) for t in range(len(x))])
            except Exception as exc:  # noqa: BLE001 - reported below, by instance
                failures.append((k, exc))

        threads = [threading.Thread(target=drive, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        for k in range(4):
            assert normalized_error(outs[k][window - 1 :], expected) <= BOUND["fp16"], k
        old = instances[0]
        instances.restart(0)
        with pytest.raises(hotpath.Error, match="restarted"):
            old.step(x[0])
        fresh = instances[0]
        got = np.stack([fresh.step(x[t]) for t in range(len(x))])
        assert normalized_error(got[window - 1 :], expected) <= BOUND["fp16"]
        instances[1].close()  # an instance's handle: the set keeps the instance
        instances[1].step(x[0])
    assert instances.closed
