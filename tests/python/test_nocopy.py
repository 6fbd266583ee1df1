"""numpy in and out without copies where the layout allows: a float32 C-contiguous input is read in
place, anything else converted once (same answers); outputs are allocated once per call, or not at all
with out=. Allocations are counted with tracemalloc, which sees numpy's data buffers."""
import tracemalloc

import numpy as np
import pytest

import hotpath


def peak_bytes(call):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = call()
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


@pytest.fixture
def engine():
    e = hotpath.Engine("lstm_s", backend="cpu", mode="streaming")
    yield e
    e.close()


def test_run_reads_float32_c_contiguous_in_place(engine):
    series = np.random.default_rng(5).standard_normal((20000, 32)).astype(np.float32)  # 2.5 MB
    out_bytes = 20000 * 4
    peak, out = peak_bytes(lambda: engine.run(series))
    assert out.nbytes == out_bytes
    assert peak < out_bytes + 16384, f"run() allocated {peak} bytes for an {out_bytes}-byte output"
    # another dtype or layout: converted once (one float32 copy of the series), same answers
    for other in (series.astype(np.float64), np.asfortranarray(series), series.astype(">f4")):
        peak, converted = peak_bytes(lambda: engine.run(other))
        assert series.nbytes <= peak < series.nbytes + out_bytes + 16384
        np.testing.assert_array_equal(converted, out)


def test_step_out_allocates_nothing(engine):
    x = np.random.default_rng(6).standard_normal(32).astype(np.float32)
    out = np.empty(1, np.float32)
    engine.step(x, out)  # warm
    peak, result = peak_bytes(lambda: engine.step(x, out))
    assert result is out and peak < 256, f"step(x, out) allocated {peak} bytes"


def test_inputs_of_any_layout_give_the_same_answers(engine):
    rng = np.random.default_rng(7)
    base = rng.standard_normal((40, 32)).astype(np.float32)
    expected = engine.run(base)
    wide = np.zeros((40, 64), np.float32)
    wide[:, ::2] = base
    variants = {
        "float64": base.astype(np.float64),
        "fortran": np.asfortranarray(base),
        "strided": wide[:, ::2],
        "big-endian": base.astype(">f4"),
        "list": base.tolist(),
        "read-only": np.frombuffer(base.tobytes(), np.float32).reshape(40, 32),
    }
    for name, series in variants.items():
        np.testing.assert_array_equal(engine.run(series), expected, err_msg=name)
        engine.reset()
        steps = np.array([engine.step(row) for row in np.asarray(series)])
        np.testing.assert_array_equal(steps, expected, err_msg=name)
    unaligned = np.frombuffer(b"\0" + base.tobytes(), np.float32, offset=1, count=base.size).reshape(40, 32)
    assert not unaligned.flags.aligned
    np.testing.assert_array_equal(engine.run(unaligned), expected)


def test_outputs_are_new_arrays_each_call(engine):
    x = np.zeros(32, np.float32)
    a, b = engine.step(x), engine.step(x)
    assert a is not b and not np.shares_memory(a, b)
    assert a.flags.c_contiguous and a.flags.writeable
