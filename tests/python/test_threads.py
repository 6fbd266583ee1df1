"""The GIL is released while the engine works, and one engine refuses a second thread instead of
racing it (engines are one thread at a time; many engines run in parallel)."""
import threading
import time

import numpy as np

import hotpath


def counter_advances_during(work):
    """How far a pure-Python counter thread gets while work() runs, and how long work() took."""
    progress = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            progress[0] += 1

    counter = threading.Thread(target=count)
    counter.start()
    time.sleep(0.02)
    before = progress[0]
    t0 = time.perf_counter()
    work()
    elapsed = time.perf_counter() - t0
    during = progress[0] - before
    stop.set()
    counter.join()
    return during, elapsed


def test_gil_released_during_run():
    e = hotpath.Engine("lstm_m", backend="ref", mode="streaming")
    series = np.zeros((400, 32), np.float32)
    started = time.perf_counter()
    e.run(series[:40])
    per_tick = (time.perf_counter() - started) / 40
    series = np.zeros((max(40, int(0.4 / per_tick)), 32), np.float32)  # about 0.4 s of work
    during, elapsed = counter_advances_during(lambda: e.run(series))
    # With the GIL held for the whole run the counter could only run in the few switch intervals
    # around it; released, it counts all along (it shares 2 cores with the engine at worst).
    assert elapsed > 0.1
    assert during > 20000, f"the counter thread advanced {during} times in {elapsed:.2f} s of run()"


def test_one_thread_at_a_time_per_engine():
    e = hotpath.Engine("lstm_m", backend="ref", mode="streaming")
    series = np.zeros((300, 32), np.float32)
    errors = []

    def worker():
        try:
            for _ in range(3):
                e.run(series)
        except hotpath.Error as err:
            errors.append(str(err))

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors, "three threads ran one engine at once without being refused"
    assert all("in use by another thread" in m for m in errors)
    assert e.run(series[:5]).shape == (5, 1)  # the engine still works


def test_engines_in_parallel_threads_agree():
    rng = np.random.default_rng(8)
    series = rng.standard_normal((4, 200, 32)).astype(np.float32)
    expected = hotpath.Engine("lstm_s", backend="cpu", mode="streaming").run(series)
    results = [None] * 4

    def worker(k):
        with hotpath.Engine("lstm_s", backend="cpu", mode="streaming") as e:
            results[k] = e.run(series[k])

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        np.testing.assert_array_equal(results[k], expected[k])


def test_gil_released_during_backtest():
    e = hotpath.Engine("lstm_m", backend="ref", mode="streaming")
    started = time.perf_counter()
    e.backtest(np.zeros((40, 32), np.float32))
    per_tick = (time.perf_counter() - started) / 40
    series = np.zeros((2, max(20, int(0.2 / per_tick)), 32), np.float32)  # about 0.4 s of work
    during, elapsed = counter_advances_during(lambda: e.backtest(series))
    assert elapsed > 0.1
    assert during > 20000, f"the counter thread advanced {during} times in {elapsed:.2f} s of backtest()"
