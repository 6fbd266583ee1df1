"""A minimal safetensors writer (the public format: 8-byte little-endian header length,
a JSON header, then the raw little-endian tensor bytes), in pure Python with numpy, so that a model
held in memory reaches the engine's one loader without a file and without the safetensors package."""
from __future__ import annotations

import json
import struct
from typing import Dict, Mapping, Optional

import numpy as np


def serialize(tensors: Mapping[str, np.ndarray], metadata: Optional[Mapping[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding `tensors` (float32 or float64 arrays) and `metadata`."""
    header: Dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    offset = 0
    for name, value in tensors.items():
        a = np.ascontiguousarray(value)
        if a.dtype == np.float64:
            dtype = "F64"
        else:
            a = np.ascontiguousarray(a, dtype=np.float32)
            dtype = "F32"
        blob = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data section starts 8-byte aligned
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)

