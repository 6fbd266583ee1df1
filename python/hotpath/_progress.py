"""The progress display of a long engine call (Engine.run, Engine.backtest).

The compiled module makes a Reporter for a call that outlasts its first poll (at once for
progress=True) and, about every 50 ms while the engine works, calls update(done) with the GIL held (right after it has let Python handle signals, so Ctrl-C stops the
call); close(done) at the end. The bar is tqdm's when tqdm is installed, else a one-line bar redrawn on
sys.stderr. progress=None shows it only when sys.stderr is a terminal and the call has run for
SHOW_AFTER_S seconds with work left; True shows it from the start wherever sys.stderr goes; False never
(the module then makes no Reporter).
"""
import sys
import time

SHOW_AFTER_S = 1.0


def _tqdm():
    """tqdm's class, or None when it is not installed (tests replace this to get the built-in bar)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


def _duration(seconds):
    seconds = int(seconds + 0.5)
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds < 3600 else f"{seconds // 3600}h{seconds // 60 % 60:02d}"


class _SimpleBar:
    """`desc: 42% 168,000/400,000 ticks, 51,200 ticks/s, ETA 0:05`, redrawn in place on sys.stderr."""

    REDRAW_S = 0.25

    def __init__(self, total, unit, desc, start):
        self.total, self.unit, self.desc = total, unit, desc
        self.start = start  # the call's: its rate counts from there
        self.drawn_at = None
        self.stream = sys.stderr  # the stream of the call's start, also if sys.stderr is replaced meanwhile

    def update(self, done, final=False):
        now = time.monotonic()
        if not final and self.drawn_at is not None and now - self.drawn_at < self.REDRAW_S:
            return
        self.drawn_at = now
        elapsed = max(now - self.start, 1e-9)
        rate = done / elapsed
        pct = 100.0 * done / self.total if self.total else 100.0
        tail = f"{elapsed:.1f} s" if final else "ETA " + (_duration((self.total - done) / rate) if rate > 0 else "?")
        self.stream.write(f"\r{self.desc}: {pct:3.0f}% {done:,}/{self.total:,} {self.unit}, {rate:,.0f} {self.unit}/s, {tail}")
        if final:
            self.stream.write("\n")
        self.stream.flush()

    def close(self, done):
        self.update(done, final=True)


class _TqdmBar:
    def __init__(self, tqdm, total, unit, desc):
        self.bar = tqdm(total=total, unit=unit, desc=desc, file=sys.stderr, leave=True, unit_scale=True)
        self.shown = 0

    def update(self, done):
        if done > self.shown:
            self.bar.update(done - self.shown)
            self.shown = done

    def close(self, done):
        self.update(done)
        self.bar.close()


class Reporter:
    """One call's display: `total` units (`unit`: "ticks", "rows"), named `desc`; `force`: progress=True;
    `elapsed`: seconds the call had run when this was made (the module makes it at the first poll)."""

    def __init__(self, total, unit, desc, force, elapsed=0.0):
        self.total, self.unit, self.desc, self.force = total, unit, desc, force
        self.start = time.monotonic() - elapsed
        self.bar = None
        if force:
            self._open()

    def _open(self):
        tqdm = _tqdm()
        self.bar = (
            _TqdmBar(tqdm, self.total, self.unit, self.desc)
            if tqdm
            else _SimpleBar(self.total, self.unit, self.desc, self.start)
        )

    def _wanted(self, done):
        if done >= self.total or time.monotonic() - self.start < SHOW_AFTER_S:
            return False
        isatty = getattr(sys.stderr, "isatty", None)
        return bool(isatty and isatty())

    def update(self, done):
        if self.bar is None and self._wanted(done):
            self._open()
        if self.bar is not None:
            self.bar.update(done)

    def close(self, done):
        if self.bar is not None:
            self.bar.close(done)
            self.bar = None
