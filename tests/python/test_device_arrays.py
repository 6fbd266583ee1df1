"""Arrays in GPU memory (docs/python.md, "Arrays on the GPU"): Engine.backtest and run_batch take anything
with __cuda_array_interface__ and keep it on the GPU. Without a GPU the checks of the interface itself are
tested with objects that describe host memory as a CUDA array (the engine then refuses the pointer by
name: host memory is never GPU memory); with one, torch tensors on the GPU give the numpy path's outputs
bit for bit (skipped where torch or a GPU is missing)."""
import numpy as np
import pytest

import hotpath
from conftest import cuda_engine


class Described:
    """A numpy array that calls itself a CUDA array (its memory is host memory)."""

    def __init__(self, array, typestr="<f4", strides=None, readonly=False, **extra):
        self.array = array
        self.__cuda_array_interface__ = {
            "shape": array.shape,
            "typestr": typestr,
            "data": (array.ctypes.data, readonly),
            "strides": strides,
            "version": 3,
            **extra,
        }


@pytest.fixture
def engine():
    sd = {
        "lstm.weight_ih_l0": np.full((16, 3), 0.1, np.float32),
        "lstm.weight_hh_l0": np.full((16, 4), 0.05, np.float32),
        "fc.weight": np.ones((2, 4), np.float32),
    }
    return hotpath.Engine(hotpath.load(sd, window=4), backend="ref", mode="window")


def series(*shape):
    return np.random.default_rng(1).standard_normal(shape).astype(np.float32)


def test_the_interface_is_read_and_checked(engine):
    x = series(2, 10, 3)
    with pytest.raises(hotpath.Error, match=r"must be float32 \(typestr '<f4'\), got '<f8'"):
        engine.backtest(Described(x.astype(np.float64), typestr="<f8"))
    with pytest.raises(hotpath.Error, match="is not C-contiguous"):
        engine.backtest(Described(x, strides=(4, 240, 12)))
    with pytest.raises(hotpath.Error, match=r"got a CUDA array of shape \(2, 10, 4\)"):
        engine.backtest(Described(series(2, 10, 4)))
    with pytest.raises(hotpath.Error, match="a masked CUDA array"):
        engine.backtest(Described(x, mask=object()))
    with pytest.raises(hotpath.Error, match="outputs in GPU memory are float32"):
        engine.backtest(Described(x), dtype=np.float64)
    # no library to make the outputs with: out= is asked for, with the shape
    with pytest.raises(hotpath.Error, match=r"need out= \(a writable float32 CUDA array of shape \(2, 10, 2\)\)"):
        engine.backtest(Described(x))
    z = np.zeros((2, 10, 2), np.float32)
    with pytest.raises(hotpath.Error, match=r"out has shape \(10, 2\), the outputs need \(2, 10, 2\)"):
        engine.backtest(Described(x), out=Described(z[0]))
    with pytest.raises(hotpath.Error, match="backtest: out: the CUDA array is read-only"):
        engine.backtest(Described(x), out=Described(z, readonly=True))
    # everything in order but the memory: the engine names the pointer
    with pytest.raises(hotpath.Error, match="backtest input: the pointer is not GPU memory"):
        engine.backtest(Described(x), out=Described(z))
    with pytest.raises(hotpath.Error, match="out= is for series in GPU memory"):
        engine.backtest(x, out=z)
    assert not z.any()  # nothing written


def test_run_batch_checks_the_same(engine):
    w = series(5, 4, 3)
    with pytest.raises(hotpath.Error, match=r"windows of shape \(B, W, 3\), got a CUDA array of shape \(20, 3\)"):
        engine.run_batch(Described(w.reshape(20, 3)))
    with pytest.raises(hotpath.Error, match="batch input: the pointer is not GPU memory"):
        engine.run_batch(Described(w), out=Described(np.zeros((5, 2), np.float32)))
    with pytest.raises(hotpath.Error, match="out= is for windows in GPU memory"):
        engine.run_batch(w, out=np.zeros((5, 2), np.float32))


def torch_cuda():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed here; the GPU array tests run where it is")
    if not torch.cuda.is_available():
        pytest.skip("no GPU test: torch sees no CUDA device")
    return torch


@pytest.mark.parametrize("mode,window", [("window", 12), ("streaming", 0)])
def test_torch_tensors_on_the_gpu_give_the_numpy_outputs(mode, window):
    torch = torch_cuda()
    sd = {
        "lstm.weight_ih_l0": series(64, 5),
        "lstm.weight_hh_l0": series(64, 16) * 0.2,
        "lstm.bias_ih_l0": series(64),
        "lstm.bias_hh_l0": series(64),
        "fc.weight": series(3, 16),
    }
    e = cuda_engine(hotpath.load(sd, window=window or 1), mode=mode)
    x = series(9, 300, 5)
    want = e.backtest(x)
    xt = torch.from_numpy(x).cuda()
    got = e.backtest(xt)
    assert isinstance(got, torch.Tensor) and got.device == xt.device and got.dtype == torch.float32
    assert got.shape == (9, 300, 3)
    np.testing.assert_array_equal(got.cpu().numpy(), want)
    one = e.backtest(xt[4])  # [T, I] -> [T, O]
    np.testing.assert_array_equal(one.cpu().numpy(), want[4])
    out = torch.full((9, 300, 3), 5.0, device=xt.device)
    assert e.backtest(xt, out=out) is out
    np.testing.assert_array_equal(out.cpu().numpy(), want)
    # a tensor still being written on torch's stream is waited for (the interface's stream)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        late = torch.from_numpy(x).cuda(non_blocking=True) * 1.0
        np.testing.assert_array_equal(e.backtest(late).cpu().numpy(), want)
    bad = xt.clone()
    bad[2, 17, 1] = float("nan")
    with pytest.raises(hotpath.TickError, match="series 2, tick 17, input 1 is NaN"):
        e.backtest(bad)
    with pytest.raises(hotpath.Error, match="must be float32"):
        e.backtest(xt.double())
    with pytest.raises(hotpath.Error, match="not C-contiguous"):
        e.backtest(xt.transpose(0, 1))


def test_fresh_windows_on_the_gpu():
    torch = torch_cuda()
    sd = {"lstm.weight_ih_l0": series(32, 4), "lstm.weight_hh_l0": series(32, 8) * 0.3, "fc.weight": series(2, 8)}
    e = cuda_engine(hotpath.load(sd, window=6), mode="batch")
    w = series(500, 6, 4)
    want = e.run_batch(w)
    got = e.run_batch(torch.from_numpy(w).cuda())
    assert isinstance(got, torch.Tensor) and got.shape == (500, 2)
    np.testing.assert_array_equal(got.cpu().numpy(), want)
