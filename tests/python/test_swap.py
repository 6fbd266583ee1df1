"""Live model swap from Python: the new model answers from the tick after the next, bit-identical in
window mode to an engine that served it from the start; every tick says which model answered it; a
refused swap leaves the old model serving; a swap from another thread while this one ticks."""
import threading
import time

import numpy as np
import pytest

import hotpath
from conftest import cuda_engine


def inputs(ticks, seed=3):
    return np.random.default_rng(seed).standard_normal((ticks, 32)).astype(np.float32)


def test_swap_between_ticks_is_exact():
    small, medium = hotpath.load("lstm_s"), hotpath.load("lstm_m")
    assert len(small.id) == 16 and small.id != medium.id
    x = inputs(60)
    fresh = hotpath.Engine(medium, backend="cpu", precision="fp32", window=8).run(x)
    e = hotpath.Engine(small, backend="cpu", precision="fp32", window=8)
    for t in range(30):
        e.step(x[t])
    assert e.model_id == small.id
    assert e.swap(medium) == medium.id
    assert e.swap_pending
    e.step(x[30])  # still lstm_s's
    assert e.model_id == small.id
    for t in range(31, 60):
        z = e.step(x[t])
        assert e.model_id == medium.id
        assert np.array_equal(z, fresh[t]), t
    assert e.swaps == 1 and not e.swap_pending
    assert e.model is medium
    assert e.facts()["model_id"] == medium.id


def test_streaming_warm_ticks_and_refusals():
    x = inputs(40, seed=4)
    e = hotpath.Engine("lstm_s", backend="cpu", mode="streaming", precision="fp32")
    for t in range(20):
        e.step(x[t])
    e.swap("lstm_m", warm_ticks=5)
    e.step(x[20])
    fresh = hotpath.Engine("lstm_m", backend="cpu", mode="streaming", precision="fp32").run(x[16:40])
    for t in range(21, 40):
        assert np.array_equal(e.step(x[t]), fresh[t - 16]), t
    with pytest.raises(hotpath.Error, match="takes 128 inputs a tick, the serving one 32"):
        e.swap("vollo_tiny")
    with pytest.raises(hotpath.Error, match="warm ticks"):
        e.swap("lstm_m", warm_ticks=-1)
    assert e.swaps == 1


def test_swap_from_another_thread_while_ticking():
    x = inputs(3000, seed=5)
    a, b = hotpath.load("lstm_s"), hotpath.load("lstm_m")
    za = hotpath.Engine(a, backend="cpu", precision="fp32", window=6).run(x)
    zb = hotpath.Engine(b, backend="cpu", precision="fp32", window=6).run(x)
    e = hotpath.Engine(a, backend="cpu", precision="fp32", window=6)
    swapped = threading.Event()

    def swapper():
        e.swap(b)
        swapped.set()

    thread = None
    ids = []
    out = np.empty((3000, 1), np.float32)
    for t in range(3000):
        if t == 500:
            thread = threading.Thread(target=swapper)
            thread.start()
        out[t] = e.step(x[t])
        ids.append(e.model_id)
        if t >= 500 and not swapped.is_set():
            time.sleep(0.0005)  # a feed, not a flood: the swap is made ready within the run
    thread.join()
    assert swapped.is_set()
    first_b = ids.index(b.id)
    assert all(i == a.id for i in ids[:first_b]) and all(i == b.id for i in ids[first_b:])
    assert np.array_equal(out[:first_b], za[:first_b]) and np.array_equal(out[first_b:], zb[first_b:])


def test_swap_room_is_for_cuda():
    with pytest.raises(hotpath.Error, match="swap_room is for cuda"):
        hotpath.Engine("lstm_s", backend="cpu", swap_room=True)
    with pytest.raises(TypeError):
        hotpath.Engine("lstm_s", backend="cpu", swap_room="yes please")


def test_cuda_swap_on_the_other_half():
    small, medium = hotpath.load("lstm_s"), hotpath.load("lstm_m")
    x = inputs(80, seed=8)
    with cuda_engine(small, window=8) as whole:
        with pytest.raises(hotpath.Error, match="swap_room"):
            whole.swap(medium)
    with cuda_engine(medium, window=8, swap_room=True) as e:
        fresh = e.run(x)
    e = cuda_engine(small, window=8, swap_room=True)
    for t in range(40):
        e.step(x[t])
    e.swap(medium)
    e.step(x[40])
    for t in range(41, 80):
        assert np.array_equal(e.step(x[t]), fresh[t]), t
    assert e.swaps == 1 and "serving on half 1" in e.facts()["swap_room"]
    e.close()
