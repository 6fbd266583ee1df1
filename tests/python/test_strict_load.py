"""Loading accounts for every tensor of the source (docs/python.md, "Loading"): a tensor the model does
not use is an error naming it, unless named in ignore=; files that are something else than safetensors
(a PyTorch pickle, a GRU's state_dict) are named as such. No torch needed: the state_dicts are numpy."""
import pickle
import zipfile

import numpy as np
import pytest

import hotpath
from helpers import random_state_dict


def mlp_head_state_dict(F):
    """nn.LSTM(3, 4) -> fc1 Linear(4, F) -> ReLU -> fc2 Linear(F, 1), as its state_dict."""
    rng = np.random.default_rng(7)
    sd = random_state_dict(rng, 3, 4, 1, F, head="fc1.")
    sd["fc2.weight"] = rng.uniform(-0.5, 0.5, (1, F)).astype(np.float32)
    sd["fc2.bias"] = rng.uniform(-0.5, 0.5, 1).astype(np.float32)
    return sd


def test_naming_the_last_linear_no_longer_drops_the_first():
    sd = mlp_head_state_dict(4)  # F = H: fc1 and fc2 are both head candidates
    with pytest.raises(hotpath.Error, match="several head candidates"):
        hotpath.load(sd)
    with pytest.raises(hotpath.Error) as e:
        hotpath.load(sd, head_prefix="fc2.")
    msg = str(e.value)
    assert "tensors 'fc1.bias', 'fc1.weight' are not used by the model (nn.LSTM 'lstm.' -> nn.Linear 'fc2.')" in msg
    assert "not a deeper head" in msg and "ignore=" in msg and "\n" not in msg


def test_a_wider_hidden_linear_is_named_too():
    sd = mlp_head_state_dict(6)  # F != H: fc1 alone looks like the head
    with pytest.raises(hotpath.Error, match=r"tensors 'fc2.bias', 'fc2.weight' are not used by the model"):
        hotpath.load(sd)


def test_ignore_is_the_explicit_way_round():
    sd = mlp_head_state_dict(4)
    m = hotpath.load(sd, head_prefix="fc2.", ignore=["fc1."])
    assert (m.head_prefix, m.output_size) == ("fc2.", 1)
    assert hotpath.load(sd, head_prefix="fc2.", ignore=("fc1.weight", "fc1.bias")).output_size == 1
    with pytest.raises(hotpath.Error, match=r"the tensors to ignore name 'fc3.', which matches no tensor"):
        hotpath.load(sd, head_prefix="fc2.", ignore=["fc1.", "fc3."])
    with pytest.raises(hotpath.Error, match=r"the tensors to ignore include 'fc2.bias', which the model uses"):
        hotpath.load(sd, head_prefix="fc2.", ignore=["fc1.", "fc2.bias"])
    with pytest.raises(TypeError, match="ignore must be a list"):
        hotpath.load(sd, head_prefix="fc2.", ignore="fc1.")


def test_ignore_reaches_files_and_bytes(tmp_path):
    sd = mlp_head_state_dict(4)
    from hotpath._safetensors import serialize

    data = serialize(sd)
    path = tmp_path / "mlp.safetensors"
    path.write_bytes(data)
    for source in (data, path, str(path)):
        with pytest.raises(hotpath.Error, match="'fc1.bias', 'fc1.weight' are not used"):
            hotpath.load(source, head_prefix="fc2.")
        assert hotpath.load(source, head_prefix="fc2.", ignore=["fc1."]).output_size == 1


def test_a_gru_state_dict_is_named():
    rng = np.random.default_rng(1)
    sd = {
        "gru.weight_ih_l0": rng.random((12, 3)), "gru.weight_hh_l0": rng.random((12, 4)),
        "gru.bias_ih_l0": rng.random(12), "gru.bias_hh_l0": rng.random(12),
        "fc.weight": rng.random((1, 4)), "fc.bias": rng.random(1),
    }
    with pytest.raises(hotpath.Error, match=r"\[3H, H\]: this is an nn.GRU's state_dict; GRU is not supported"):
        hotpath.load(sd)


@pytest.mark.parametrize("kind", ["zip", "legacy"])
def test_a_torch_save_pickle_is_named(tmp_path, kind):
    """torch.save writes a zip archive (or, legacy, a bare pickle): both are named, with the fix."""
    path = tmp_path / "model.pt"
    if kind == "zip":
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("archive/data.pkl", pickle.dumps({"lstm.weight_ih_l0": [0.0]}, protocol=2))
    else:
        path.write_bytes(pickle.dumps({"lstm.weight_ih_l0": [0.0] * 100}, protocol=2))
    with pytest.raises(hotpath.Error) as e:
        hotpath.load(path)
    assert str(e.value).startswith(f"{path}: is a PyTorch pickle")
    assert str(e.value).endswith("not safetensors: save the state_dict with safetensors.torch.save_file")
    with pytest.raises(hotpath.Error, match=r"^<bytes>: is a PyTorch pickle"):
        hotpath.load(path.read_bytes())


def test_a_zoo_name_refuses_prefixes_and_ignore():
    with pytest.raises(hotpath.Error, match=r"^'lstm_s' is a zoo model, but a head prefix 'fc.' was given"):
        hotpath.load("lstm_s", head_prefix="fc.")
    with pytest.raises(hotpath.Error, match=r"^'lstm_s' is a zoo model, but a tensor to ignore 'aux.' was given"):
        hotpath.load("lstm_s", ignore=["aux."])
