"""Against PyTorch itself: a module owning an nn.LSTM and an nn.Linear, loaded straight from the module
(its state_dict, no file), gives PyTorch's own float64 answers in window and streaming mode. Skipped
where torch is not installed (it is on the GPU machine)."""
import numpy as np
import pytest

import hotpath
from helpers import BOUND, normalized_error

torch = pytest.importorskip("torch", reason="PyTorch is not installed here; the torch tests run where it is")
nn = torch.nn


class Net(nn.Module):
    """Non-default prefixes (encoder.rnn., head.), as a trained model might have them."""

    def __init__(self, i, h, layers, o, bias=True):
        super().__init__()
        self.encoder = nn.Module()
        self.encoder.rnn = nn.LSTM(i, h, layers, bias=bias, batch_first=True)
        self.head = nn.Linear(h, o, bias=bias)

    def forward(self, x):  # [B, T, I] -> [B, T, O]: the head after every step
        y, _ = self.encoder.rnn(x)
        return self.head(y)


def torch_streaming(net, x):
    with torch.no_grad():
        return net(torch.from_numpy(x.astype(np.float64))[None])[0].numpy()


def torch_window(net, x, window):
    with torch.no_grad():
        xt = torch.from_numpy(x.astype(np.float64))
        return np.array([net(xt[None, max(0, t - window + 1) : t + 1])[0, -1].numpy() for t in range(len(x))])


@pytest.fixture
def net():
    torch.manual_seed(3)
    return Net(6, 24, 2, 3).double()


@pytest.fixture
def series():
    return np.random.default_rng(9).standard_normal((40, 6)).astype(np.float32)


def test_module_loads_without_a_file(net):
    m = hotpath.load(net, window=8)
    assert (m.input_size, m.hidden_size, m.num_layers, m.output_size, m.window) == (6, 24, 2, 3, 8)
    assert (m.lstm_prefix, m.head_prefix, m.dtype, m.name) == ("encoder.rnn.", "head.", "F64", "<Net module>")


@pytest.mark.parametrize("backend,precision", [("ref", "fp64"), ("cpu", "fp32"), ("cpu", "bf16")])
def test_streaming_matches_torch(net, series, backend, precision):
    e = hotpath.Engine(net, backend=backend, precision=precision, mode="streaming")
    assert normalized_error(e.run(series, dtype=np.float64), torch_streaming(net, series)) <= BOUND[precision]


@pytest.mark.parametrize("backend,precision", [("ref", "fp64"), ("cpu", "fp32"), ("cpu", "bf16")])
def test_window_matches_torch(net, series, backend, precision):
    e = hotpath.Engine(hotpath.load(net, window=8), backend=backend, precision=precision)
    got = e.run(series, dtype=np.float64)
    assert normalized_error(got, torch_window(net, series, 8)) <= BOUND[precision]  # partial windows too
    batch = np.stack([series[t - 7 : t + 1] for t in range(7, 40)])
    assert normalized_error(e.run_batch(batch), got[7:]) <= BOUND["fp32"] + BOUND[precision]


def test_float32_module_and_state_dict_agree(series):
    torch.manual_seed(4)
    net = Net(6, 16, 1, 1)
    a = hotpath.Engine(net, backend="ref", mode="streaming").run(series, dtype=np.float64)
    b = hotpath.Engine(hotpath.load(net.state_dict()), backend="ref", mode="streaming").run(series, dtype=np.float64)
    np.testing.assert_array_equal(a, b)
    assert normalized_error(a, torch_streaming(net.double(), series)) <= BOUND["fp64"]


def test_bf16_module_loads_exactly(series):
    torch.manual_seed(5)
    net = Net(6, 16, 1, 2).to(torch.bfloat16)
    m = hotpath.load(net)
    got = hotpath.Engine(m, backend="ref", mode="streaming").run(series, dtype=np.float64)
    assert normalized_error(got, torch_streaming(net.double(), series)) <= BOUND["fp64"]


def test_torch_tensors_as_inputs(net, series):
    e = hotpath.Engine(net, backend="cpu", mode="streaming")
    expected = e.run(series)
    np.testing.assert_array_equal(e.run(torch.from_numpy(series)), expected)
    e.reset()
    np.testing.assert_array_equal(e.step(torch.from_numpy(series[0])), expected[0])


def test_ambiguous_module_names_the_candidates():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.LSTM(3, 4)
            self.b = nn.LSTM(3, 4)
            self.fc = nn.Linear(4, 1)

    with pytest.raises(hotpath.Error, match="found: a, b"):
        hotpath.load(Two())
    # The whole state_dict reaches the loader: the LSTM left out must be named as unused.
    with pytest.raises(hotpath.Error, match=r"tensors 'a.bias_hh_l0', .* are not used by the model"):
        hotpath.load(Two(), lstm_prefix="b.")
    m = hotpath.load(Two(), lstm_prefix="b.", ignore=["a."])
    assert m.lstm_prefix == "b." and m.head_prefix == "fc."


class MlpHead(nn.Module):
    """nn.LSTM -> fc1 -> ReLU -> fc2: a deeper head than hotpath computes."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 8, batch_first=True)
        self.fc1 = nn.Linear(8, 8)  # fc2's weight is then [1, H]: shaped like a head
        self.fc2 = nn.Linear(8, 1)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.fc2(torch.relu(self.fc1(y)))


def test_mlp_head_is_refused_not_answered_wrongly():
    """Naming fc2 the head once dropped fc1 without a word and answered something else than PyTorch."""
    torch.manual_seed(3)
    net = MlpHead()
    with pytest.raises(hotpath.Error, match=r"expected one nn.Linear head, found 2: fc1, fc2; hotpath computes"):
        hotpath.load(net)
    with pytest.raises(hotpath.Error, match=r"tensors 'fc1.bias', 'fc1.weight' are not used by the model"):
        hotpath.load(net, head_prefix="fc2.")


def test_unsupported_lstms_are_refused():
    class Bi(nn.Module):
        def __init__(self, **kw):
            super().__init__()
            self.lstm = nn.LSTM(3, 4, **kw)
            self.fc = nn.Linear(8 if kw.get("bidirectional") else 4, 1)

    with pytest.raises(hotpath.Error, match="bidirectional"):
        hotpath.load(Bi(bidirectional=True))
    with pytest.raises(hotpath.Error, match="proj_size"):
        hotpath.load(Bi(proj_size=2))


def test_module_on_gpu(series):
    if not torch.cuda.is_available():
        pytest.skip("no GPU test: torch sees no CUDA device")
    torch.manual_seed(6)
    net = Net(6, 16, 1, 1)
    expected = hotpath.Engine(net, backend="ref", mode="streaming").run(series)
    got = hotpath.Engine(net.cuda(), backend="ref", mode="streaming").run(series)
    np.testing.assert_array_equal(got, expected)
