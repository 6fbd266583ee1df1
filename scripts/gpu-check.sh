#!/usr/bin/env bash
# One device call: configure + build (Release, Ninja) on the GPU machine, run the GPU tests, then the
# standard benchmarks; logs and JSON go under $OUT (the benchmarks' JSON in one archive).
#
#   scripts/gpu-check.sh [--quick]      (run from the repository root; OUT defaults to ./gpu-out)
#   BENCH_TICKS=N   ticks of the `hotpath bench` runs (default 1000000; 0 skips them)
#   GPU_TESTS=0 / CPU_TESTS=0 / SWEEP=0   skip the GPU tests / the CPU backend's tests / cuda_sweep
#   FAMILIES=0   skip cuda_sweep --families (every zoo model on the cta, cluster and grid kernels)
#   CAPI_TESTS=0   skip the C ABI's GPU test and the installed-package test
#   PARALLEL_TESTS=0 / SANITIZER=0 / KILL_TEST=0   skip the GPU tests under ctest -j8 / under
#   compute-sanitizer / the kill test (scripts/gpu-soak.sh); SOAK=1 adds the 5-minute soak
#   BENCH_CPU=0 / TORCH_CASE=0   skip gpu-bench.sh's cpu runs / its fresh PyTorch golden case
#   PY_TESTS=0   skip the Python package's tests (pytest, GPU and torch included) and overhead benchmark
#   CAPI_BENCH=0   skip the C ABI's overhead benchmark (bench_capi_overhead, cpu backend, pinned)
#   ENGINE_TESTS=0   skip the engine layer's tests (test_engine: auto on this GPU, the fallback, the shadow;
#                    test_scaling: the input scalers' leak test on every backend, cuda included)
#   CPU_BENCH=1    also run scripts/cpu-bench.sh (the CPU benchmarks: its own CPU-only build)
#   FIRST_TICKS=1  also the cuda first-tick runs (lstm_s window, warm and --no-warm)
#   RAY_BENCH=1    also run bench/ray_scaling.py (docs/ray.md: one Ray GPU worker vs the local engine,
#                  1/2/4 CPU workers); needs ray importable by python3 (wheels: docs/ray.md, "Scaling")
#   INSTANCES_BENCH=1  also run scripts/instances-bench.sh (docs/cuda.md: many instances on one GPU, the
#                  scaling table and the backtest beside 8 instances; its logs and JSON under $OUT/instances)
#   GPU_LABELS=re   the CTest labels the ctest -j8 run takes (default: every executable that launches kernels)
#   GPU_FILTER=pattern   the gtest filter of the GPU test run (default: all of test_cuda_backend)
#   PROBE=1        also run cluster_probe and grid_probe (what one exchange inside a thread-block cluster,
#                  and across the whole GPU, costs)
#
# The golden cases are the repository's own (tests/data/golden), so nothing needs carrying.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
LOG=$OUT/gpu-check.log
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
JOBS=$(nproc)
say() { echo "== $*" | tee -a "$LOG"; }
. "$ROOT/scripts/lib/gpu-guard.sh"
: >"$LOG"

say "machine"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv; lscpu | grep -E 'Model name|^CPU\(s\)|NUMA node'; nvcc --version | tail -1; } >>"$LOG" 2>&1

say "configure + build"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHOTPATH_BENCHMARKS=OFF -DHOTPATH_CUDA_PTXAS_VERBOSE=ON \
  >>"$LOG" 2>&1 || { say "configure FAILED"; tail -30 "$LOG"; exit 1; }
t0=$(date +%s)
ninja -C "$BUILD" -j"$JOBS" test_cuda_backend cuda_sweep cluster_probe grid_probe test_cpu_backend >>"$LOG" 2>&1 || { say "build FAILED"; grep -E 'error|FAILED' "$LOG" | head -30; exit 1; }
HAVE_CLI=0
if [ "${SKIP_CLI:-0}" != 1 ]; then
  ninja -C "$BUILD" -j"$JOBS" hotpath >>"$LOG" 2>&1 && HAVE_CLI=1 || say "hotpath CLI did not build (others' code): CLI benchmarks skipped"
fi
say "build took $(( $(date +%s) - t0 )) s"
grep -E 'registers|spill' "$LOG" | sort | uniq -c | head -8
OBJ=$(find "$BUILD" -name 'lstm_cta.cu.o' | head -1)
if command -v cuobjdump >/dev/null && [ -n "$OBJ" ]; then
  say "SASS instruction mix of the LSTM kernel (HMMA = tensor cores, LDL/STL = local memory)"
  cuobjdump --dump-sass "$OBJ" | gzip -9 >"$OUT/sass.txt.gz"
  zcat "$OUT/sass.txt.gz" | grep -oE 'HMMA[.A-Z0-9]*|LDS\.128|LDL[.A-Z0-9]*|STL[.A-Z0-9]*|LDG\.E\.128[.A-Z]*|STG\.E\.128[.A-Z.]*|ST\.E\.128[.A-Z.]*|LD\.E\.128[.A-Z.]*' | sort | uniq -c | tee -a "$LOG"
  # the grid kernel's too (its tick path: docs/cuda.md, "where a grid tick's time goes")
  GOBJ=$(find "$BUILD" -name 'lstm_grid.cu.o' | head -1)
  [ -n "$GOBJ" ] && cuobjdump --dump-sass "$GOBJ" | gzip -9 >"$OUT/sass-grid.txt.gz"
fi

if [ "${GPU_TESTS:-1}" = 1 ]; then
  say "GPU tests"
  # the kernel-family tests run every zoo model, the big ones too: ~3 minutes of the total
  timeout 600 "$BUILD/tests/cuda/test_cuda_backend" --gtest_filter="${GPU_FILTER:-*}" --gtest_output=xml:"$OUT/tests.xml" >"$OUT/tests.log" 2>&1
  rc=$?
  say "tests rc=$rc"
  grep -E '^\[(golden|long|facts|pingpong|vollo|variant|family)|FAILED|PASSED|Failure' "$OUT/tests.log" | head -190 | tee -a "$LOG"
fi

# The C ABI on the GPU: test_capi_gpu (cuda and auto through hotpath_engine_*), and the installed package
# from a separate project (capi_consumer: examples/ with backend auto, so libhotpath.so's static CUDA
# runtime drives the kernel), with the exported-symbol check.
if [ "${CAPI_TESTS:-1}" = 1 ]; then
  say "C ABI tests (test_capi_gpu, capi_package)"
  ninja -C "$BUILD" -j"$JOBS" >>"$LOG" 2>&1 || say "full build FAILED (the package needs every target)"
  timeout 300 ctest --test-dir "$BUILD" -L '^(test_capi_gpu|capi_package)$' -V >"$OUT/capi.log" 2>&1
  say "C ABI tests rc=$?"
  grep -E 'engine: |tick [0-4]:|Skipped|Passed|Failed|tests passed|libhotpath.so:' "$OUT/capi.log" | head -30 | tee -a "$LOG"
fi

# The Python package (docs/python.md): its pytest suite, whose GPU and PyTorch tests skip elsewhere (the
# image's python3 has torch, numpy, pytest and nanobind, so configure built the module in), and what
# Python adds to a CPU tick. Everything goes into the main log.
if [ "${PY_TESTS:-1}" = 1 ]; then
  say "Python package tests"
  if ninja -C "$BUILD" -j"$JOBS" hotpath_python >>"$LOG" 2>&1; then
    PYTHONPATH="$BUILD/python" timeout 300 python3 -m pytest -ra -p no:cacheprovider tests/python 2>&1 | tail -12 | tee -a "$LOG"
    PYTHONPATH="$BUILD/python" timeout 120 python3 bench/python_overhead.py --model lstm_s --cpuset 2 2>&1 | tee -a "$LOG"
  else
    say "the Python module did not build (python3 needs numpy and nanobind; see the log)"
  fi
fi

if [ "${RAY_BENCH:-0}" = 1 ]; then
  say "hotpath.ray scaling (bench/ray_scaling.py)"
  if python3 -c 'import ray, ray.data' 2>/dev/null && ninja -C "$BUILD" -j"$JOBS" hotpath_python >>"$LOG" 2>&1; then
    RAY_USAGE_STATS_ENABLED=0 PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" timeout 400 python3 bench/ray_scaling.py \
      --gpu --cpu --json "$OUT/ray-scaling.json" 2>&1 | grep -vE ' (DEBUG|INFO) ' | tee -a "$LOG"
  else
    say "ray (with ray.data) is not importable by python3, or the module did not build: skipped"
  fi
fi

if [ "${INSTANCES_BENCH:-0}" = 1 ]; then
  say "many instances on one GPU (scripts/instances-bench.sh)"
  OUT="$OUT/instances" BUILD_DIR="$BUILD" TESTS=0 bash scripts/instances-bench.sh 2>&1 | grep -v '^\[trace\]' | tail -60 | tee -a "$LOG"
fi

if [ "${ENGINE_TESTS:-1}" = 1 ]; then
  say "engine tests (auto on this GPU, fallback, shadow)"
  ninja -C "$BUILD" -j"$JOBS" test_engine >>"$LOG" 2>&1 && timeout 200 "$BUILD/tests/engine/test_engine" >"$OUT/engine-tests.log" 2>&1
  say "engine tests rc=$?"
  grep -E '^\[auto|FAILED|PASSED|Failure' "$OUT/engine-tests.log" | head -20 | tee -a "$LOG"
  ninja -C "$BUILD" -j"$JOBS" test_scaling >>"$LOG" 2>&1 && timeout 200 "$BUILD/tests/engine/test_scaling" >>"$OUT/engine-tests.log" 2>&1
  say "scaling tests rc=$?"
  grep -E 'FAILED|PASSED|Failure|SKIPPED' "$OUT/engine-tests.log" | tail -5 | tee -a "$LOG"
fi

# The C ABI's cost over Engine::step (docs/capi.md, "Overhead": <= 50 ns), on a quiet pinned core of this
# Xeon.
if [ "${CAPI_BENCH:-1}" = 1 ]; then
  say "C ABI overhead (bench_capi_overhead)"
  cmake -S . -B "$BUILD" -DHOTPATH_BENCHMARKS=ON >>"$LOG" 2>&1
  if ninja -C "$BUILD" -j"$JOBS" bench_capi_overhead >>"$LOG" 2>&1; then
    for mode in streaming window; do
      timeout 150 "$BUILD/bench/bench_capi_overhead" --model lstm_s --backend cpu --mode $mode --cpuset 2-5 \
        --ticks "${CAPI_TICKS:-100000}" --warmup 5000 --json "$OUT/capi-overhead-lstm_s-$mode.json" 2>&1 | tee -a "$LOG"
    done
  else
    say "bench_capi_overhead did not build (needs Google Benchmark found: see the log)"
  fi
fi

# The same GPU tests through ctest -j8: the `gpu` resource lock must give the verdict of the run alone.
if [ "${PARALLEL_TESTS:-1}" = 1 ]; then
  say "GPU tests under ctest -j8"
  timeout 400 ctest --test-dir "$BUILD" -j8 -L "${GPU_LABELS:-^(test_cuda_backend|test_engine|test_scaling|test_capi_gpu|capi_package)\$}" \
    --output-on-failure >"$OUT/ctest-j8.log" 2>&1
  say "ctest -j8 rc=$?"
  grep -E 'tests passed|tests failed|\(Failed\)|Timeout' "$OUT/ctest-j8.log" | head -20 | tee -a "$LOG"
fi

# New or changed kernels run once under compute-sanitizer (memcheck, racecheck, synccheck).
if [ "${SANITIZER:-1}" = 1 ]; then
  say "compute-sanitizer"
  # The tools slow the kernels 20-50x, so tests with deadlines (ping-pong timing, stalled-kernel
  # timeouts) are left out: they fail there on time alone.
  for tool in memcheck racecheck synccheck; do
    echo "== $tool" >>"$OUT/sanitizer.log"
    bounded 150 compute-sanitizer --tool $tool --error-exitcode 9 "$BUILD/tests/cuda/test_cuda_backend" \
      --gtest_filter="${SANITIZER_FILTER:-*CudaGolden*:*StreamingAndOddWindows*:*NanAndInf*:CudaPingPong.BothKernelPaths*:Zoo/CudaFamily.*/lstm_s_cluster:Zoo/CudaFamily.*/lstm_s_grid}" \
      >>"$OUT/sanitizer.log" 2>&1
    say "compute-sanitizer $tool rc=$?"
    grep -E 'ERROR SUMMARY|PASSED|FAILED' "$OUT/sanitizer.log" | tail -3 | tee -a "$LOG"
  done
fi

if [ "${CPU_TESTS:-1}" = 1 ]; then
  say "CPU backend tests (the AVX-512 path runs here)"
  timeout 200 "$BUILD/tests/cpu/test_cpu_backend" >"$OUT/cpu-tests.log" 2>&1
  say "cpu tests rc=$?"
  tail -3 "$OUT/cpu-tests.log" | tee -a "$LOG"
fi

if [ "${PROBE:-0}" = 1 ]; then
  say "cluster probe (one exchange inside a cluster; host -> cluster -> host round trips)"
  timeout 200 "$BUILD/tests/cuda/cluster_probe" --rounds 20000 --trips 100000 --cpu 2 2>&1 | tee -a "$LOG"
  say "grid probe (one exchange across the GPU's blocks, no model)"
  timeout 100 "$BUILD/tests/cuda/grid_probe" --rounds 20000 2>&1 | tee -a "$LOG"
fi

others=$(gpu_others)
[ -n "$others" ] && say "other processes hold the GPU (pids $others): the benchmarks below are void"
if [ "${SWEEP:-1}" = 1 ]; then
say "variant sweep"
SWEEP_ARGS=(--json "$OUT/sweep.json" --cpu 2)
[ $QUICK = 1 ] && SWEEP_ARGS+=(--ticks 300000 --pp 100000)
PIN=()
[ "$JOBS" -ge 4 ] && PIN=(taskset -c 2-$((JOBS - 1)))  # keep cores 0-1 for the system
timeout 420 "${PIN[@]}" "$BUILD/tests/cuda/cuda_sweep" "${SWEEP_ARGS[@]}" 2>&1 | tee -a "$LOG"
fi

if [ "${FAMILIES:-1}" = 1 ]; then
say "kernel families (every zoo model on the cta, cluster and grid kernels, ping-pong of each width beside)"
timeout 420 "$BUILD/tests/cuda/cuda_sweep" --families --ticks "${FAMILY_TICKS:-100000}" --pp 100000 --cpu 2 \
  --json "$OUT/families.json" 2>&1 | tee -a "$LOG"
fi

# ---- hotpath bench: golden checks and the standard benchmarks through the CLI ---------------------
# BENCH_TICKS=0 skips them (e.g. to run them in a second call on the still-warm machine).
if [ "$HAVE_CLI" = 1 ] && [ "${BENCH_TICKS:-1000000}" != 0 ]; then
  scripts/gpu-bench.sh "$BUILD" "$OUT" "${BENCH_TICKS:-1000000}" 2>&1 | tee -a "$LOG"
fi
# The kill test: a SIGKILLed host leaves no kernel behind; the next process starts normally.
if [ "$HAVE_CLI" = 1 ] && [ "${KILL_TEST:-1}" = 1 ]; then
  say "kill test"
  scripts/gpu-soak.sh "$BUILD" "$OUT" kill 2>&1 | tee -a "$LOG"
fi
# The soak: SOAK=1 runs scripts/gpu-soak.sh soak (SOAK_SECONDS, 300 by default).
if [ "$HAVE_CLI" = 1 ] && [ "${SOAK:-0}" = 1 ]; then
  say "soak"
  scripts/gpu-soak.sh "$BUILD" "$OUT" soak 2>&1 | tee -a "$LOG"
fi
# First ticks on the GPU: the engine warmed on creation, and not.
if [ "$HAVE_CLI" = 1 ] && [ "${FIRST_TICKS:-0}" = 1 ]; then
  for warm in warm no-warm; do
    say "cuda first ticks, $warm"
    flag=(); [ $warm = no-warm ] && flag=(--no-warm)
    timeout 120 "$BUILD/hotpath" bench --model lstm_s --backend cuda --mode window --ticks 100000 --cpuset 2 "${flag[@]}" \
      --json "$OUT/cuda-first-ticks-$warm.json" 2>&1 | grep -E 'tick latency|ping-pong|first 10|error vs' | tee -a "$LOG"
  done
fi
# Throughput (docs/cuda.md): THROUGHPUT=1 runs scripts/throughput-bench.sh (hotpath and PyTorch side by
# side).
if [ "$HAVE_CLI" = 1 ] && [ "${THROUGHPUT:-0}" = 1 ]; then
  say "throughput"
  scripts/throughput-bench.sh "$BUILD" "$OUT" "${THROUGHPUT_BACKENDS:-cpu cuda}" 2>&1 | tail -40 | tee -a "$LOG"
fi
# ---- end of hotpath bench section ------------------------------------------------------------------
# The CPU path's benchmarks, on this machine's Xeon.
if [ "${CPU_BENCH:-0}" = 1 ]; then
  scripts/cpu-bench.sh "$OUT" "${CPU_BENCH_TICKS:-200000}" 2>&1 | tail -3 | tee -a "$LOG"
fi
say "done"
