#!/usr/bin/env bash
# Configures and builds the release tree in build/ (CUDA backend included when nvcc is found).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
cmake --preset release >/dev/null
cmake --build --preset release
