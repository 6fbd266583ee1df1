"""pytest setup for the hotpath package tests. They import `hotpath` from wherever it is installed or
from the build tree (scripts/test.sh sets PYTHONPATH=build/python); they read only this repository."""
import numpy as np
import pytest

import hotpath


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def cuda_engine(model, **options):
    """An Engine on the cuda backend, or a skip saying why there is none (no CUDA build, no device)."""
    if "cuda" not in hotpath.backends():
        pytest.skip("no GPU test: this hotpath was built without CUDA")
    try:
        return hotpath.Engine(model, backend="cuda", **options)
    except hotpath.UnsupportedError as e:
        # A cuda engine still open in this process (a leak in the tests) must fail, not skip every GPU test.
        if "already runs a hotpath kernel" in str(e):
            raise
        pytest.skip(f"no GPU test: {e}")
