#!/usr/bin/env bash
# Builds and runs every test: the release tree (GPU tests skip themselves, saying so, without a GPU),
# then the host code again under AddressSanitizer + UBSan (clang), whose tree also builds the libFuzzer
# targets and runs each for a short smoke run (HOTPATH_FUZZ_SECONDS, 60 by default), then the Python
# package: `pip install` from the release tree, and its pytest suite (tests/python) last.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --preset release -j2
# The tests use the repository's own golden cases. Where the project's shared copy sits beside the
# checkout (CI on the project's machines), its cases are verified too, on every host backend.
shared=../shared/golden
if [ -d "$shared" ]; then
  for model in "$shared"/*.model.safetensors; do
    name=$(basename "$model" .model.safetensors)
    for backend in "ref" "cpu --precision fp32" "cpu --precision bf16"; do
      build/hotpath verify --model "$model" --golden "$shared/$name.golden.safetensors" --backend $backend \
        | sed "s/^/$name: /"
    done
  done
fi
cmake --preset asan -DHOTPATH_FUZZ_SECONDS="${HOTPATH_FUZZ_SECONDS:-60}" >/dev/null
cmake --build --preset asan --target test_safetensors test_loader test_reference test_cli test_bench test_engine test_engine_metrics test_swap test_llm test_capi test_cuda_plan test_telemetry hotpath fuzzers
ctest --preset asan -j2 -L '^(test_safetensors|test_loader|test_reference|test_cli|test_bench|test_engine|test_engine_metrics|test_swap|test_llm|test_capi|test_cuda_plan|test_telemetry|fuzz)$'
# The Python package. `pip install .` proven without compiling the C++ core again: a wheel built from
# the release tree (same interpreter, nanobind and cache values as scripts/build.sh, so only the
# install step runs) is installed into an empty venv, which pulls numpy, and imported there. Then the
# pytest suite against the module in build/python.
rm -rf build/pip-check
.venv/bin/python3 -m pip wheel . -q --no-build-isolation --no-deps -Cbuild-dir=build -w build/pip-check
.venv/bin/python3 -m venv build/pip-check/venv
build/pip-check/venv/bin/python -m pip install -q --disable-pip-version-check build/pip-check/hotpath-*.whl
(cd build/pip-check && venv/bin/python -c 'import hotpath, numpy as np
e = hotpath.Engine("lstm_s", backend="cpu")
print("pip install: hotpath", hotpath.__version__, "from", hotpath.__file__.rsplit("/", 2)[0], "backends", hotpath.backends(),
      "run", e.run(np.zeros((60, 32), np.float32)).shape)')
# The wheel's `hotpath` command: the bundled C++ CLI behind the console script, and `import` in Python
# (onnx is an extra, not installed here: it must say so in one line, exit 2).
build/pip-check/venv/bin/hotpath --help | grep -q "import  Convert an ONNX model"
build/pip-check/venv/bin/hotpath info --model lstm_s | sed "s/^/pip install: hotpath info: /"
set +e
import_err=$(build/pip-check/venv/bin/hotpath import --onnx none.onnx --out none.safetensors 2>&1); import_rc=$?
set -e
if [ "$import_rc" != 2 ] || [ "$(printf '%s\n' "$import_err" | wc -l)" != 1 ] || [[ "$import_err" != *"needs the onnx package"* ]]; then
  echo "pip install: hotpath import without onnx: expected one line and exit 2, got $import_rc: $import_err"; exit 1
fi
# hotpath.ray's tests need ray (a local cluster on 127.0.0.1); where it cannot be installed they skip,
# saying so.
.venv/bin/python3 -m pip install -q --disable-pip-version-check -r python/requirements-ray.txt \
  || echo "test: ray could not be installed into .venv: the Ray tests (tests/python/test_ray.py) will skip"
RAY_USAGE_STATS_ENABLED=0 PYTHONPATH=build/python .venv/bin/python3 -m pytest -ra tests/python
