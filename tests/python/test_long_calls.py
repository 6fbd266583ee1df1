"""Long calls (Engine.run, backtest, run_batch) can be stopped with Ctrl-C and show a progress bar.

SIGINT is sent to this process from a timer thread while the call runs; KeyboardInterrupt must reach
the caller within 0.5 s of it, and the engine must then give what a fresh engine gives."""
import io
import os
import signal
import threading
import time

import numpy as np
import pytest

import hotpath
from hotpath import _progress


def interrupted_after(call, delay=0.2):
    """Runs call() with SIGINT sent to this process `delay` s in; returns seconds from signal to exception."""
    sent = []

    def send():
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    # Python's own SIGINT handler, which a process started with SIGINT ignored (a background job of a
    # non-interactive shell) does not get: what this test checks is the call's answer to it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(delay, send)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            call()
        caught = time.monotonic()
    finally:
        timer.cancel()
        timer.join()
        signal.signal(signal.SIGINT, previous)
    assert sent, "the call ended before the signal was sent"
    return caught - sent[0]


@pytest.fixture(scope="module")
def long_series():
    # 400 k ticks of lstm_s: minutes in window mode on a small machine, seconds on a large one.
    return np.random.default_rng(4).standard_normal((400_000, 32), dtype=np.float32)


def two_cores():
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores this process may use")
    return cores[:2]


@pytest.mark.parametrize("mode", ["window", "streaming"])
def test_ctrl_c_stops_a_backtest_and_the_engine_still_works(long_series, mode):
    with hotpath.Engine("lstm_s", backend="cpu", mode=mode) as engine:
        assert interrupted_after(lambda: engine.backtest(long_series, progress=False)) < 0.5
        assert engine.ticks == 0
        short = long_series[:500]
        with hotpath.Engine("lstm_s", backend="cpu", mode=mode) as fresh:
            np.testing.assert_array_equal(engine.backtest(short), fresh.backtest(short))
            np.testing.assert_array_equal(engine.run(short), fresh.run(short))


def test_ctrl_c_stops_a_backtest_on_a_cpuset(long_series):
    # The backtest's own thread and the cpuset's worker both stop; the engine then runs ticks again.
    with hotpath.Engine("lstm_s", backend="cpu", mode="window", cpuset=two_cores()) as engine:
        assert interrupted_after(lambda: engine.backtest(long_series, progress=False)) < 0.5
        with hotpath.Engine("lstm_s", backend="cpu", mode="window") as fresh:
            np.testing.assert_array_equal(engine.backtest(long_series[:200]), fresh.backtest(long_series[:200]))
            np.testing.assert_array_equal(engine.run(long_series[:200]), fresh.run(long_series[:200]))


def test_ctrl_c_stops_run_and_leaves_the_engine_reset(long_series):
    with hotpath.Engine("lstm_s", backend="cpu", mode="streaming") as engine:
        assert interrupted_after(lambda: engine.run(long_series, progress=False)) < 0.5
        assert engine.ticks == 0
        with hotpath.Engine("lstm_s", backend="cpu", mode="streaming") as fresh:
            np.testing.assert_array_equal(engine.run(long_series[:300]), fresh.run(long_series[:300]))


def test_ctrl_c_stops_a_ref_backtest(long_series):
    with hotpath.Engine("lstm_s", backend="ref", mode="streaming") as engine:
        assert interrupted_after(lambda: engine.backtest(long_series[:100_000], progress=False)) < 0.5
        assert engine.ticks == 0


def test_run_in_chunks_is_the_step_loop(rng):
    # run() hands control to Python between chunks of ticks (256, 512, ...): its outputs are still
    # those of one tick after another.
    x = rng.standard_normal((3000, 32), dtype=np.float32)
    with hotpath.Engine("lstm_s", backend="cpu", mode="window") as engine:
        z = engine.run(x)
        engine.reset()
        stepped = np.stack([engine.step(x[t]) for t in range(len(x))])
    np.testing.assert_array_equal(z, stepped)


def test_ctrl_c_stops_run_batch_and_keeps_the_state():
    # 6,000 fresh windows of lstm_m (50 steps of 2.7 MFLOP each): seconds on a small machine.
    x = np.random.default_rng(5).standard_normal((6000, 50, 32), dtype=np.float32)
    with hotpath.Engine("lstm_m", backend="cpu", mode="streaming") as engine:
        z = engine.run(x[0, :7])
        assert interrupted_after(lambda: engine.run_batch(x, progress=False)) < 0.5
        assert engine.ticks == 7  # run_batch never touches the tick state
        np.testing.assert_array_equal(engine.run_batch(x[:3]), np.concatenate([engine.run_batch(x[k : k + 1]) for k in range(3)]))
        assert z.shape == (7, 1)


def test_run_batch_in_chunks_is_every_window_alone(rng):
    # 1,500 windows go in chunks of 256, 512, ...: each window's output is what it gives alone, and a
    # NaN is still named by its place in the whole batch.
    x = rng.standard_normal((1500, 6, 32), dtype=np.float32)
    with hotpath.Engine("lstm_s", backend="cpu") as engine:
        z = engine.run_batch(x)
        for k in (0, 255, 256, 767, 768, 1499):
            np.testing.assert_array_equal(z[k], engine.run_batch(x[k : k + 1])[0])
        x[1234, 2, 5] = np.nan
        with pytest.raises(hotpath.TickError, match=r"window 1234, step 2 holds NaN"):
            engine.run_batch(x)


@pytest.fixture
def builtin_bar(monkeypatch):
    """The built-in bar, whether or not tqdm is installed."""
    monkeypatch.setattr(_progress, "_tqdm", lambda: None)


@pytest.mark.parametrize("method,unit", [("backtest", "rows"), ("run", "ticks"), ("run_batch", "windows")])
def test_progress_true_draws_the_bar_on_stderr(rng, capsys, builtin_bar, method, unit):
    x = rng.standard_normal((1400, 2, 32) if method == "run_batch" else (2, 700, 32), dtype=np.float32)
    with hotpath.Engine("lstm_s", backend="cpu") as engine:
        getattr(engine, method)(x, progress=True)
    err = capsys.readouterr().err
    assert f"{method}: 100% 1,400/1,400 {unit}" in err, err
    assert err.endswith("\n")


def test_an_interrupted_call_ends_its_bar_with_a_newline(long_series, capsys, builtin_bar):
    with hotpath.Engine("lstm_s", backend="cpu", mode="window") as engine:
        interrupted_after(lambda: engine.backtest(long_series, progress=True))
    err = capsys.readouterr().err
    assert err.startswith("\rbacktest: ") and err.endswith(" s\n"), err


def test_progress_true_uses_tqdm_when_installed(rng, capsys):
    pytest.importorskip("tqdm")
    with hotpath.Engine("lstm_s", backend="cpu") as engine:
        engine.backtest(rng.standard_normal((300, 32), dtype=np.float32), progress=True)
    err = capsys.readouterr().err
    assert "backtest" in err and "100%" in err and "300/300" in err, err


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_default_only_on_a_terminal_and_a_long_call(rng, monkeypatch, builtin_bar):
    x = rng.standard_normal((4000, 32), dtype=np.float32)
    with hotpath.Engine("lstm_s", backend="cpu", mode="streaming") as engine:
        # A terminal, but the call ends before SHOW_AFTER_S: nothing.
        term = Terminal()
        monkeypatch.setattr("sys.stderr", term)
        engine.backtest(x)
        assert term.getvalue() == ""
        # A terminal and a call that has run long enough (0 s here): the bar.
        monkeypatch.setattr(_progress, "SHOW_AFTER_S", 0.0)
        monkeypatch.setattr(_progress._SimpleBar, "REDRAW_S", 0.0)
        slow = np.repeat(x, 10, axis=0)  # 40 k ticks: past the first 50 ms poll
        engine.backtest(slow)
        assert "backtest: 100% 40,000/40,000 rows" in term.getvalue()
        # Not a terminal: nothing, however long.
        plain = io.StringIO()
        monkeypatch.setattr("sys.stderr", plain)
        engine.backtest(slow)
        engine.backtest(slow, progress=False)
        assert plain.getvalue() == ""


def test_progress_false_never_draws(rng, monkeypatch, builtin_bar):
    monkeypatch.setattr(_progress, "SHOW_AFTER_S", 0.0)
    term = Terminal()
    monkeypatch.setattr("sys.stderr", term)
    with hotpath.Engine("lstm_s", backend="cpu", mode="streaming") as engine:
        engine.run(rng.standard_normal((20_000, 32), dtype=np.float32), progress=False)
    assert term.getvalue() == ""


def test_progress_must_be_a_bool_or_none(rng):
    with hotpath.Engine("lstm_s", backend="cpu") as engine:
        with pytest.raises(hotpath.Error, match=r"backtest: progress must be True, False or None, got 'yes'"):
            engine.backtest(np.zeros((3, 32), np.float32), progress="yes")
        with pytest.raises(hotpath.Error, match=r"run: progress must be True, False or None, got 1"):
            engine.run(np.zeros((3, 32), np.float32), progress=1)
