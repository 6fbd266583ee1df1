"""hotpath: microsecond LSTM inference (PyTorch nn.LSTM + nn.Linear semantics) from Python.

    import numpy as np, hotpath
    model = hotpath.load("lstm_s")                       # a file, bytes, a zoo name or a torch module
    with hotpath.Engine(model, backend="cpu", precision="fp32") as engine:
        z = engine.step(np.zeros(model.input_size, np.float32))      # one tick -> [O]
        zs = engine.run(np.zeros((100, model.input_size), np.float32))  # a series [T, I] -> [T, O]

    model = hotpath.load("model.onnx")                     # an ONNX LSTM graph (needs onnx)
    model.save("model.safetensors")                        # as a hotpath model file

docs/python.md has the full API; hotpath.export saves a torch module as a model file.
"""
try:
    from ._hotpath import (
        BackendError,
        Engine,
        Error,
        Instances,
        Model,
        TickError,
        UnsupportedError,
        __version__,
        backends,
        zoo,
    )
except ImportError as e:  # the sources (python/hotpath) without the compiled module beside them
    if e.name != __name__ + "._hotpath":
        raise
    raise ImportError(
        "hotpath's compiled module is missing here (" + __path__[0] + "): install the package with "
        "`pip install .`, or build it with scripts/build.sh and use PYTHONPATH=build/python"
    ) from e
from . import export
from ._load import load, _save

Model.save = _save

__all__ = [
    "Engine",
    "Error",
    "Instances",
    "Model",
    "TickError",
    "UnsupportedError",
    "BackendError",
    "__version__",
    "backends",
    "load",
    "zoo",
]
