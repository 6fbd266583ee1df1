"""hotpath.load: a model from a file, bytes, a zoo name, a PyTorch module or a state_dict. Every way in
ends in the engine's one loader (open_model / open_model_bytes), so every source is validated alike."""
from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import _hotpath
from ._keywords import named_keywords
from ._safetensors import serialize

Model = _hotpath.Model


@named_keywords
def load(
    source: Any,
    *,
    window: Optional[int] = None,
    lstm_prefix: Optional[str] = None,
    head_prefix: Optional[str] = None,
    ignore: Optional[Sequence[str]] = None,
) -> Model:
    """The model in `source`, validated (raises hotpath.Error naming the problem).

    source: a path (str or os.PathLike) to a safetensors state_dict, or to an ONNX model (`.onnx`: LSTM
    nodes and a Gemm/MatMul head, docs/python.md "ONNX models"; needs the onnx package), else a zoo name
    (hotpath.zoo()); an onnx.ModelProto;
    the bytes of such a file (bytes, bytearray or memoryview); a torch.nn.Module that owns one nn.LSTM
    and one nn.Linear head (read from its state_dict(), no file); or a state_dict itself (a mapping of
    names to tensors or numpy arrays).
    window: the model's default sliding-window length (else the file's metadata, if any).
    lstm_prefix / head_prefix: the key prefixes (e.g. "encoder.rnn.", "head."), when detection is
    ambiguous; for a module, they pick the nn.LSTM / nn.Linear when it owns more than one.
    ignore: tensors of the source that the module does not use (names, or prefixes ending in "."). Every
    other tensor must be used by the model: one that is not (the first Linear of an MLP head, ...) is an
    error naming it, never dropped in silence.
    """
    if isinstance(ignore, (str, bytes)):  # a lone string would be taken letter by letter
        raise TypeError("load(): ignore must be a list of tensor names or prefixes, not a string")
    ignore = None if ignore is None else [str(x) for x in ignore]
    if isinstance(source, Model):
        if window is None and lstm_prefix is None and head_prefix is None and ignore is None:
            return source
        raise _hotpath.Error("load(): a Model is already loaded; pass its source to change window, prefixes or ignore")
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = source if isinstance(source, bytes) else bytes(source)
        return _hotpath._open_model_bytes(data, "<bytes>", lstm_prefix, head_prefix, window, ignore)
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if path.lower().endswith(".onnx"):
            return _load_onnx(path, path, window, lstm_prefix, head_prefix, ignore)
        return _hotpath._open_model(path, lstm_prefix, head_prefix, window, ignore)
    if _is_onnx_model(source):
        return _load_onnx(source, "<onnx model>", window, lstm_prefix, head_prefix, ignore)
    if _is_torch_module(source):
        data, lstm_prefix, head_prefix = _module_bytes(source, lstm_prefix, head_prefix)
        name = f"<{type(source).__name__} module>"
        return _hotpath._open_model_bytes(data, name, lstm_prefix, head_prefix, window, ignore)
    if isinstance(source, Mapping):
        tensors = {str(k): _as_array(v) for k, v in source.items()}
        return _hotpath._open_model_bytes(serialize(tensors), "<state_dict>", lstm_prefix, head_prefix, window, ignore)
    raise TypeError(
        "hotpath.load() takes a path, a zoo name, bytes, an onnx.ModelProto, a torch.nn.Module or a state_dict, not "
        + type(source).__name__
    )


def _save(self: Model, path: "os.PathLike[str] | str") -> None:
    """Write the model to `path` as a hotpath .safetensors file (model.to_safetensors(): float64 weights,
    exact; window, prefixes and scaler in its metadata), whole or not at all."""
    from ._files import write_atomically

    try:
        write_atomically(os.fspath(path), self.to_safetensors(), "save()")
    except (ValueError, OSError) as e:
        raise _hotpath.Error(f"save(): {e}" if isinstance(e, OSError) else str(e)) from None


def _load_onnx(
    source: Any,
    name: str,
    window: Optional[int],
    lstm_prefix: Optional[str],
    head_prefix: Optional[str],
    ignore: Optional[List[str]],
) -> Model:
    if lstm_prefix is not None or head_prefix is not None or ignore is not None:
        raise _hotpath.Error(f"{name}: lstm_prefix, head_prefix and ignore name safetensors keys; an ONNX model has none")
    from . import _onnx

    data, _ = _onnx.to_safetensors(source, name, window)
    return _hotpath._open_model_bytes(data, name, None, None, window)


def _is_onnx_model(x: Any) -> bool:
    onnx = sys.modules.get("onnx")  # an onnx.ModelProto exists only once onnx is imported
    return onnx is not None and isinstance(x, onnx.ModelProto)


def _is_torch_module(x: Any) -> bool:
    torch = sys.modules.get("torch")  # a torch module exists only once torch is imported
    return torch is not None and isinstance(x, torch.nn.Module)


def _as_array(value: Any) -> np.ndarray:
    """A tensor or array as a float numpy array: float64 stays float64 (exact), anything else float32."""
    if hasattr(value, "detach"):  # a torch tensor: to the CPU, and out of bf16/fp16 exactly
        value = value.detach().cpu()
        value = value.double() if str(value.dtype) == "torch.float64" else value.float()
        value = value.numpy()
    a = np.asarray(value)
    return a if a.dtype == np.float64 else a.astype(np.float32, copy=False)


def _single(module: Any, kind: type, what: str, given: Optional[str], option: str) -> str:
    """The key prefix of the one `kind` submodule (e.g. "encoder.rnn."), or the prefix given."""
    if given is not None:
        return given
    found: List[Tuple[str, Any]] = [(n, m) for n, m in module.named_modules() if isinstance(m, kind)]
    if len(found) != 1:
        names = ", ".join(n or "<root>" for n, _ in found) or "none"
        if len(found) > 1 and what == "nn.Linear":  # an MLP head: naming one Linear would drop the rest
            raise _hotpath.Error(
                f"expected one nn.Linear head, found {len(found)}: {names}; hotpath computes nn.LSTM -> one "
                "nn.Linear, not a deeper head (if the module's forward uses only one of them, name it with "
                "head_prefix= and the unused ones with ignore=)"
            )
        raise _hotpath.Error(
            f"expected exactly one {what} in the module, found: {names} (name the one to use with {option}=)"
        )
    name = found[0][0]
    return f"{name}." if name else ""


def _module_bytes(module: Any, lstm_prefix: Optional[str], head_prefix: Optional[str]) -> Tuple[bytes, str, str]:
    """The module's whole state_dict() as safetensors bytes, with the prefixes of its nn.LSTM and
    nn.Linear; the engine's loader then checks them (bidirectional and proj_size LSTMs are refused
    there) and refuses any tensor the model would not use, so no layer is dropped in silence."""
    import torch.nn as nn

    lstm_prefix = _single(module, nn.LSTM, "nn.LSTM", lstm_prefix, "lstm_prefix")
    head_prefix = _single(module, nn.Linear, "nn.Linear", head_prefix, "head_prefix")
    tensors: Dict[str, np.ndarray] = {k: _as_array(v) for k, v in module.state_dict().items()}
    return serialize(tensors), lstm_prefix, head_prefix
