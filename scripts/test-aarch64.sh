#!/usr/bin/env bash
# The aarch64 job (docs/portability.md): hotpath cross-built for 64-bit Arm Linux (CMake preset aarch64:
# Debian's aarch64-linux-gnu g++, CUDA and the Python module off) and its host tests run under qemu-user.
# Needs what `scripts/setup.sh --aarch64` installs. Runs after the native tests in CI (.ci/run).
#  0. The CUDA backend's host sources compiled for aarch64 (syntax only) where the toolkit's headers are.
#  1. As a Grace-like core (qemu max with 128-bit SVE2: FEAT_DotProd, FEAT_I8MM, FEAT_BF16; the NEON
#     tables): every NEON path (fp32, bf16 widened and BFDOT, int8 USDOT) and the portable one on the
#     golden cases; the NEON paths on the random shapes and backtests; model, loader, reference, scaling,
#     engine, C ABI, the LLM harness's parsers and reports, the bench plumbing, the GPU planner's host code,
#     tick telemetry's histogram (its atomics under Arm's weaker ordering) and its exporter's refusal: the
#     preset builds with HOTPATH_METRICS=OFF, as the cross tree has no aarch64 prometheus-cpp.
#  2. With 256- and 512-bit SVE: the SVE tables on the golden cases (all but the largest) and the choice.
#  3. As a base Armv8.0 core (cortex-a57: no dot products): the kernel choice falls back (int8 to the
#     portable kernels, bf16 widened) and the golden cases pass there too.
# Left to the native job: the portable 16-lane kernels on random shapes and long runs (the same C++ on
# both), two long runs of plumbing, the CLI's own tests (each would start qemu), the sanitizers and fuzzers,
# the Python package.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
  command -v "$tool" >/dev/null || { echo "test-aarch64: $tool not found: run scripts/setup.sh --aarch64"; exit 1; }
done
# The CUDA backend's host code (mailbox, launches, plans) compiles for aarch64 too, against the toolkit's
# headers (the same on every architecture); without an aarch64 CUDA toolkit it is not linked or run here.
nvcc_path=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
cuda_include="$(dirname "$(dirname "$nvcc_path")")/include"
if [ -f "$cuda_include/cuda_runtime.h" ]; then
  for f in src/cuda/*.cpp; do
    aarch64-linux-gnu-g++ -std=c++20 -fsyntax-only -Isrc -Iinclude -I"$cuda_include" "$f"
  done
  echo "test-aarch64: the CUDA backend's host sources compile for aarch64 ($(ls src/cuda/*.cpp | wc -l) files)"
else
  echo "test-aarch64: no CUDA toolkit headers: the CUDA backend's host sources are not compiled for aarch64"
fi
cmake --preset aarch64 >/dev/null
env -u QEMU_CPU cmake --build --preset aarch64  # gtest lists the tests on qemu's default core
jobs="${HOTPATH_TEST_JOBS:-2}"
# The tests' hang guards (tests/common/within_seconds.hpp) were set for native speed; qemu runs spinning
# threads many times slower (EngineShadow's reset cycles: 27 s here against a 30 s guard).
export HOTPATH_TEST_TIME_SCALE=10
# The CPU backend's paths, less the portable 16-lane ones outside the golden cases, and four long runs
# that test no ISA (threads, series lengths; they run in the native job).
cpu_skip='(Shapes_|CpuBacktest_|LongRun_|Int8Shapes_)[^ ]*generic|CpuBacktest\.GoldenCasesAsSeveralSeries|CpuBacktest\.LongSeries|CpuBackend\.LstmSWindowThreaded|CpuPrecomputeSplit\.RowsAnswerAsWindowsAndInline'
# Two long runs of plumbing, no ISA in them (50 and 47 s a case under qemu; the native job runs them): the bench's
# streaming check in chunks and the shadow engine's reset cycles.
plumbing_skip='Bench\.TheStreamingCheckInChunks|EngineShadow\.Resets'
labels='^(test_util|test_loader|test_npy|test_safetensors|test_scaling|test_input_scaler|test_reference|test_engine|test_capi|test_llm|test_bench|test_instances|test_cuda_plan|test_cpu_backend|test_telemetry)$'
# The test names were listed (at build time) on qemu's default core, 512-bit SVE: a pass on another core
# leaves out the names of tables that core lacks, which would select no case there and pass empty.
choice='CpuBackend\.VariantNamesThePath|CpuIsaChoice\.'
echo "test-aarch64: a Grace-like core (qemu max, 128-bit SVE2: the NEON tables)"
QEMU_CPU="max,sve-default-vector-length=16" ctest --preset aarch64 -j"$jobs" -L "$labels" -E "$cpu_skip|$plumbing_skip|_sve_" --timeout 900
# qemu runs SVE an element at a time (~100x NEON's cost): the SVE tables take the golden cases but the
# largest (small2x128: 80-95 s a case under qemu), which docs/portability.md records as run by hand.
sve_golden='^(Cpu/(Golden_|Int8Golden_)\.[A-Za-z]+/(tiny|multi_out)_[^ ]*sve_|'"$choice"')'
for bytes in 32 64; do
  echo "test-aarch64: SVE with $((bytes * 8))-bit vectors (qemu max, sve-default-vector-length=$bytes)"
  QEMU_CPU="max,sve-default-vector-length=$bytes" ctest --preset aarch64 -j"$jobs" -R "$sve_golden" --timeout 900
done
echo "test-aarch64: a base Armv8.0 core (cortex-a57: no dot products, no SVE)"
QEMU_CPU=cortex-a57 ctest --preset aarch64 -j"$jobs" -R '^(Cpu/Golden_|Cpu/Int8Golden_|CpuInt8\.|'"$choice"')' \
  -E 'neon_(dot|a8|a16)|_sve_' --timeout 900
