#!/usr/bin/env bash
# Configures and builds the release tree in build/ (CUDA backend included when nvcc is found), with the
# Python module (build/python/hotpath) when the project venv .venv exists (scripts/setup.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
python=()
# The same interpreter path that `pip install` from .venv passes, so that both configure alike.
[ -x .venv/bin/python3 ] && python=(-DPython_EXECUTABLE="$PWD/.venv/bin/python3")
cmake --preset release "${python[@]}" >/dev/null
cmake --build --preset release
