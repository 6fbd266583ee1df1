#!/usr/bin/env bash
# One device call: configure + build (Release, Ninja) on the GPU machine, run the GPU tests, then the
# standard benchmarks; logs and JSON go under OUT (the benchmarks' JSON in one archive).
#
#   scripts/gpu-check.sh [--quick] [--skip PARTS] [--with PARTS] [--only PARTS] [options]   (from anywhere)
#
# PARTS: comma-separated names. Run unless skipped:
#   gpu-tests        test_cuda_backend (--gpu-filter PATTERN: its gtest filter; default every test)
#   capi-tests       the C ABI's GPU test and the installed-package test
#   py-tests         the Python package's tests (pytest, GPU and torch included) and overhead benchmark
#   engine-tests     test_engine (auto on this GPU, the fallback, the shadow), test_scaling and test_hybrid
#   capi-bench       the C ABI's overhead benchmark (bench_capi_overhead, cpu backend, pinned)
#   parallel-tests   the GPU tests under ctest -j8 (--gpu-labels RE: the CTest labels it takes)
#   sanitizer        compute-sanitizer memcheck, racecheck, synccheck (--sanitizer-filter PATTERN)
#   cpu-tests        the CPU backend's tests
#   sweep            cuda_sweep (--quick: fewer ticks)
#   families         cuda_sweep --families (every zoo model on the cta, cluster and grid kernels)
#   bench            gpu-bench.sh: golden checks and the standard hotpath bench runs (--bench-ticks N;
#                    its own parts: --no-bench-cpu, --no-torch-case)
#   kill-test        a SIGKILLed host leaves no kernel behind (gpu-soak.sh kill)
# Run only when asked (--with):
#   probe            cluster_probe and grid_probe (one exchange inside a cluster, and across the GPU; a look
#                    at words beside tile loads)
#   soak             the 5-minute soak (gpu-soak.sh soak)
#   first-ticks      the cuda first-tick runs (lstm_s window, warm and --no-warm)
#   throughput       scripts/throughput-bench.sh (hotpath and PyTorch side by side)
#   cpu-bench        scripts/cpu-bench.sh (the CPU benchmarks: its own CPU-only build)
#   ray-bench        bench/ray_scaling.py (docs/ray.md); needs ray importable by python3
#   instances-bench  scripts/instances-bench.sh (many instances on one GPU; logs and JSON under OUT/instances)
#   hybrid-bench     scripts/hybrid-bench.sh (the hybrid backend's kernel variants and the cpu backend side by
#                    side; --hybrid-ticks N)
# Options: --out DIR (default $OUT, else ./gpu-out), --build DIR (default ./build-gpu), --family-ticks N,
# --capi-ticks N, --cpu-bench-ticks N, --throughput-backends "cpu cuda", --no-cli (skip the hotpath CLI),
# --plan (print the parts that would run, and stop). Commands recorded before 2026-12-04 name the parts by
# environment variables (GPU_TESTS=0, SWEEP=0, PROBE=1, BENCH_TICKS=N, ...): the block below still reads
# those, in this one place, so that every recorded command runs as it did.
#
# The golden cases are the repository's own (tests/data/golden), so nothing needs carrying.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

DEFAULT_PARTS="gpu-tests capi-tests py-tests engine-tests capi-bench parallel-tests sanitizer cpu-tests sweep families bench kill-test"
OPTIONAL_PARTS="probe soak first-ticks throughput cpu-bench ray-bench instances-bench hybrid-bench"
declare -A RUN
for p in $DEFAULT_PARTS; do RUN[$p]=1; done
for p in $OPTIONAL_PARTS; do RUN[$p]=0; done
die() { echo "gpu-check.sh: $*" >&2; exit 2; }
set_parts() {  # set_parts VALUE LIST
  local p
  for p in ${2//,/ }; do
    [ -n "${RUN[$p]+x}" ] || die "unknown part '$p' (parts: $DEFAULT_PARTS $OPTIONAL_PARTS)"
    RUN[$p]=$1
  done
}
number() { [[ "$2" =~ ^[0-9]+$ ]] || die "$1 takes a whole number, not '$2'"; echo "$2"; }

# The environment toggles of the recorded commands (see above), read here only.
legacy() {  # legacy VAR PART
  local v=${!1:-}
  [ -z "$v" ] && return
  case $v in 0) RUN[$2]=0 ;; 1) RUN[$2]=1 ;; *) die "$1=$v: 0 or 1" ;; esac
}
legacy GPU_TESTS gpu-tests; legacy CAPI_TESTS capi-tests; legacy PY_TESTS py-tests; legacy ENGINE_TESTS engine-tests
legacy CAPI_BENCH capi-bench; legacy PARALLEL_TESTS parallel-tests; legacy SANITIZER sanitizer; legacy CPU_TESTS cpu-tests
legacy SWEEP sweep; legacy FAMILIES families; legacy KILL_TEST kill-test; legacy PROBE probe; legacy SOAK soak
legacy FIRST_TICKS first-ticks; legacy THROUGHPUT throughput; legacy CPU_BENCH cpu-bench; legacy RAY_BENCH ray-bench
legacy INSTANCES_BENCH instances-bench
BENCH_TICKS=${BENCH_TICKS:-1000000}
GPU_FILTER=${GPU_FILTER:-*}
GPU_LABELS=${GPU_LABELS:-^(test_cuda_backend|test_engine|test_scaling|test_hybrid|test_capi_gpu|capi_package)\$}
SANITIZER_FILTER=${SANITIZER_FILTER:-*CudaGolden*:*StreamingAndOddWindows*:*NanAndInf*:CudaPingPong.BothKernelPaths*:Zoo/CudaFamily.*/lstm_s_cluster:Zoo/CudaFamily.*/lstm_s_grid}
FAMILY_TICKS=${FAMILY_TICKS:-100000}
CAPI_TICKS=${CAPI_TICKS:-100000}
CPU_BENCH_TICKS=${CPU_BENCH_TICKS:-200000}
HYBRID_TICKS=200000
THROUGHPUT_BACKENDS=${THROUGHPUT_BACKENDS:-cpu cuda}
BENCH_CPU=${BENCH_CPU:-1}
TORCH_CASE=${TORCH_CASE:-1}
SKIP_CLI=${SKIP_CLI:-0}
OUT=${OUT:-$ROOT/gpu-out}
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
QUICK=0
PLAN=0

need() { [ $# -ge 2 ] || die "$1 needs a value"; }  # need "$@": the flag in $1 has its value in $2
while [ $# -gt 0 ]; do
  arg=$1
  case $arg in
    --quick) QUICK=1 ;;
    --skip) need "$@"; set_parts 0 "$2"; shift ;;
    --with) need "$@"; set_parts 1 "$2"; shift ;;
    --only) need "$@"; for p in $DEFAULT_PARTS $OPTIONAL_PARTS; do RUN[$p]=0; done; set_parts 1 "$2"; shift ;;
    --bench-ticks) need "$@"; BENCH_TICKS=$(number "$arg" "$2") || exit 2; shift ;;
    --family-ticks) need "$@"; FAMILY_TICKS=$(number "$arg" "$2") || exit 2; shift ;;
    --capi-ticks) need "$@"; CAPI_TICKS=$(number "$arg" "$2") || exit 2; shift ;;
    --cpu-bench-ticks) need "$@"; CPU_BENCH_TICKS=$(number "$arg" "$2") || exit 2; shift ;;
    --hybrid-ticks) need "$@"; HYBRID_TICKS=$(number "$arg" "$2") || exit 2; shift ;;
    --gpu-filter) need "$@"; GPU_FILTER=$2; shift ;;
    --gpu-labels) need "$@"; GPU_LABELS=$2; shift ;;
    --sanitizer-filter) need "$@"; SANITIZER_FILTER=$2; shift ;;
    --throughput-backends) need "$@"; THROUGHPUT_BACKENDS=$2; shift ;;
    --no-bench-cpu) BENCH_CPU=0 ;;
    --no-torch-case) TORCH_CASE=0 ;;
    --no-cli) SKIP_CLI=1 ;;
    --out) need "$@"; OUT=$2; shift ;;
    --build) need "$@"; BUILD=$2; shift ;;
    --plan) PLAN=1 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$arg' (see --help)" ;;
  esac
  shift
done
[ "$BENCH_TICKS" = 0 ] && RUN[bench]=0
export BENCH_CPU TORCH_CASE  # gpu-bench.sh's own parts
if [ $PLAN = 1 ]; then
  for p in $DEFAULT_PARTS $OPTIONAL_PARTS; do [ "${RUN[$p]}" = 1 ] && echo "$p"; done
  echo "quick=$QUICK bench_ticks=$BENCH_TICKS build=$BUILD out=$OUT"
  exit 0
fi
on() { [ "${RUN[$1]}" = 1 ]; }

mkdir -p "$OUT"
LOG=$OUT/gpu-check.log
JOBS=$(nproc)
say() { echo "== $*" | tee -a "$LOG"; }
. "$ROOT/scripts/lib/gpu-guard.sh"
: >"$LOG"

say "machine"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv; lscpu | grep -E 'Model name|^CPU\(s\)|NUMA node'; nvcc --version | tail -1; } >>"$LOG" 2>&1

say "configure + build"
cmake --preset gpu -B "$BUILD" >>"$LOG" 2>&1 || { say "configure FAILED"; tail -30 "$LOG"; exit 1; }
t0=$(date +%s)
ninja -C "$BUILD" -j"$JOBS" test_cuda_backend cuda_sweep cluster_probe grid_probe test_cpu_backend >>"$LOG" 2>&1 || { say "build FAILED"; grep -E 'error|FAILED' "$LOG" | head -30; exit 1; }
HAVE_CLI=0
if [ "$SKIP_CLI" != 1 ]; then
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

if on gpu-tests; then
  say "GPU tests"
  # the kernel-family tests run every zoo model, the big ones too: ~3 minutes of the total
  timeout 600 "$BUILD/tests/cuda/test_cuda_backend" --gtest_filter="$GPU_FILTER" --gtest_output=xml:"$OUT/tests.xml" >"$OUT/tests.log" 2>&1
  rc=$?
  say "tests rc=$rc"
  grep -E '^\[(golden|long|facts|pingpong|vollo|variant|family)|FAILED|PASSED|Failure' "$OUT/tests.log" | head -190 | tee -a "$LOG"
fi

# The C ABI on the GPU: test_capi_gpu (cuda and auto through hotpath_engine_*), and the installed package
# from a separate project (capi_consumer: examples/ with backend auto, so libhotpath.so's static CUDA
# runtime drives the kernel), with the exported-symbol check.
if on capi-tests; then
  say "C ABI tests (test_capi_gpu, capi_package)"
  ninja -C "$BUILD" -j"$JOBS" >>"$LOG" 2>&1 || say "full build FAILED (the package needs every target)"
  timeout 300 ctest --test-dir "$BUILD" -L '^(test_capi_gpu|capi_package)$' -V >"$OUT/capi.log" 2>&1
  say "C ABI tests rc=$?"
  grep -E 'engine: |tick [0-4]:|Skipped|Passed|Failed|tests passed|libhotpath.so:' "$OUT/capi.log" | head -30 | tee -a "$LOG"
fi

# The Python package (docs/python.md): its pytest suite, whose GPU and PyTorch tests skip elsewhere (the
# image's python3 has torch, numpy, pytest and nanobind, so configure built the module in), and what
# Python adds to a CPU tick. Everything goes into the main log.
if on py-tests; then
  say "Python package tests"
  if ninja -C "$BUILD" -j"$JOBS" hotpath_python >>"$LOG" 2>&1; then
    PYTHONPATH="$BUILD/python" timeout 300 python3 -m pytest -ra -p no:cacheprovider tests/python 2>&1 | tail -12 | tee -a "$LOG"
    PYTHONPATH="$BUILD/python" timeout 120 python3 bench/python_overhead.py --model lstm_s --cpuset 2 2>&1 | tee -a "$LOG"
  else
    say "the Python module did not build (python3 needs numpy and nanobind; see the log)"
  fi
fi

if on ray-bench; then
  say "hotpath.ray scaling (bench/ray_scaling.py)"
  if python3 -c 'import ray, ray.data' 2>/dev/null && ninja -C "$BUILD" -j"$JOBS" hotpath_python >>"$LOG" 2>&1; then
    RAY_USAGE_STATS_ENABLED=0 PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" timeout 400 python3 bench/ray_scaling.py \
      --gpu --cpu --json "$OUT/ray-scaling.json" 2>&1 | grep -vE ' (DEBUG|INFO) ' | tee -a "$LOG"
  else
    say "ray (with ray.data) is not importable by python3, or the module did not build: skipped"
  fi
fi

if on hybrid-bench; then
  say "the hybrid backend's variants (scripts/hybrid-bench.sh)"
  ninja -C "$BUILD" -j"$JOBS" hotpath >>"$LOG" 2>&1 &&
    scripts/hybrid-bench.sh --hotpath "$BUILD/hotpath" --out "$OUT" --ticks "$HYBRID_TICKS" 2>&1 | tail -25 | tee -a "$LOG"
fi

if on instances-bench; then
  say "many instances on one GPU (scripts/instances-bench.sh)"
  OUT="$OUT/instances" BUILD_DIR="$BUILD" TESTS=0 bash scripts/instances-bench.sh 2>&1 | grep -v '^\[trace\]' | tail -60 | tee -a "$LOG"
fi

if on engine-tests; then
  say "engine tests (auto on this GPU, fallback, shadow)"
  ninja -C "$BUILD" -j"$JOBS" test_engine >>"$LOG" 2>&1 && timeout 200 "$BUILD/tests/engine/test_engine" >"$OUT/engine-tests.log" 2>&1
  say "engine tests rc=$?"
  grep -E '^\[auto|FAILED|PASSED|Failure' "$OUT/engine-tests.log" | head -20 | tee -a "$LOG"
  ninja -C "$BUILD" -j"$JOBS" test_scaling >>"$LOG" 2>&1 && timeout 200 "$BUILD/tests/engine/test_scaling" >>"$OUT/engine-tests.log" 2>&1
  say "scaling tests rc=$?"
  grep -E 'FAILED|PASSED|Failure|SKIPPED' "$OUT/engine-tests.log" | tail -5 | tee -a "$LOG"
  ninja -C "$BUILD" -j"$JOBS" test_hybrid >>"$LOG" 2>&1 && timeout 200 "$BUILD/tests/hybrid/test_hybrid" >>"$OUT/engine-tests.log" 2>&1
  say "hybrid tests rc=$?"
  grep -E '^\[hybrid|FAILED|PASSED|Failure|SKIPPED' "$OUT/engine-tests.log" | tail -24 | tee -a "$LOG"
fi

# The C ABI's cost over Engine::step (docs/capi.md, "Overhead": <= 50 ns), on a quiet pinned core of this
# Xeon.
if on capi-bench; then
  say "C ABI overhead (bench_capi_overhead)"
  cmake -S . -B "$BUILD" -DHOTPATH_BENCHMARKS=ON >>"$LOG" 2>&1
  if ninja -C "$BUILD" -j"$JOBS" bench_capi_overhead >>"$LOG" 2>&1; then
    for mode in streaming window; do
      timeout 150 "$BUILD/bench/bench_capi_overhead" --model lstm_s --backend cpu --mode $mode --cpuset 2-5 \
        --ticks "$CAPI_TICKS" --warmup 5000 --json "$OUT/capi-overhead-lstm_s-$mode.json" 2>&1 | tee -a "$LOG"
    done
  else
    say "bench_capi_overhead did not build (needs Google Benchmark found: see the log)"
  fi
fi

# The same GPU tests through ctest -j8: the `gpu` resource lock must give the verdict of the run alone.
if on parallel-tests; then
  say "GPU tests under ctest -j8"
  timeout 400 ctest --test-dir "$BUILD" -j8 -L "$GPU_LABELS" \
    --output-on-failure >"$OUT/ctest-j8.log" 2>&1
  say "ctest -j8 rc=$?"
  grep -E 'tests passed|tests failed|\(Failed\)|Timeout' "$OUT/ctest-j8.log" | head -20 | tee -a "$LOG"
fi

# New or changed kernels run once under compute-sanitizer (memcheck, racecheck, synccheck).
if on sanitizer; then
  say "compute-sanitizer"
  # The tools slow the kernels 20-50x, so tests with deadlines (ping-pong timing, stalled-kernel
  # timeouts) are left out: they fail there on time alone.
  for tool in memcheck racecheck synccheck; do
    echo "== $tool" >>"$OUT/sanitizer.log"
    bounded 150 compute-sanitizer --tool $tool --error-exitcode 9 "$BUILD/tests/cuda/test_cuda_backend" \
      --gtest_filter="$SANITIZER_FILTER" \
      >>"$OUT/sanitizer.log" 2>&1
    say "compute-sanitizer $tool rc=$?"
    grep -E 'ERROR SUMMARY|PASSED|FAILED' "$OUT/sanitizer.log" | tail -3 | tee -a "$LOG"
  done
fi

if on cpu-tests; then
  say "CPU backend tests (the AVX-512 path runs here)"
  timeout 200 "$BUILD/tests/cpu/test_cpu_backend" >"$OUT/cpu-tests.log" 2>&1
  say "cpu tests rc=$?"
  tail -3 "$OUT/cpu-tests.log" | tee -a "$LOG"
fi

if on probe; then
  say "cluster probe (one exchange inside a cluster; host -> cluster -> host round trips)"
  timeout 200 "$BUILD/bench/cuda/cluster_probe" --rounds 20000 --trips 100000 --cpu 2 2>&1 | tee -a "$LOG"
  say "grid probe (one exchange across the GPU's blocks, no model)"
  timeout 100 "$BUILD/bench/cuda/grid_probe" --rounds 20000 2>&1 | tee -a "$LOG"
  say "grid probe --look (one look at words in L2, alone and beside a layer's tile loads)"
  timeout 60 "$BUILD/bench/cuda/grid_probe" --look --rounds 20000 2>&1 | tee -a "$LOG"
fi

others=$(gpu_others)
[ -n "$others" ] && say "other processes hold the GPU (pids $others): the benchmarks below are void"
if on sweep; then
say "variant sweep"
SWEEP_ARGS=(--json "$OUT/sweep.json" --cpu 2)
[ $QUICK = 1 ] && SWEEP_ARGS+=(--ticks 300000 --pp 100000)
PIN=()
[ "$JOBS" -ge 4 ] && PIN=(taskset -c 2-$((JOBS - 1)))  # keep cores 0-1 for the system
timeout 420 "${PIN[@]}" "$BUILD/bench/cuda/cuda_sweep" "${SWEEP_ARGS[@]}" 2>&1 | tee -a "$LOG"
fi

if on families; then
say "kernel families (every zoo model on the cta, cluster and grid kernels, ping-pong of each width beside)"
timeout 420 "$BUILD/bench/cuda/cuda_sweep" --families --ticks "$FAMILY_TICKS" --pp 100000 --cpu 2 \
  --json "$OUT/families.json" 2>&1 | tee -a "$LOG"
fi

# ---- hotpath bench: golden checks and the standard benchmarks through the CLI ---------------------
# --skip bench (or --bench-ticks 0) skips them (e.g. to run them in a second call on the still-warm machine).
if [ "$HAVE_CLI" = 1 ] && on bench; then
  scripts/gpu-bench.sh --build "$BUILD" --out "$OUT" --ticks "$BENCH_TICKS" 2>&1 | tee -a "$LOG"
fi
# The kill test: a SIGKILLed host leaves no kernel behind; the next process starts normally.
if [ "$HAVE_CLI" = 1 ] && on kill-test; then
  say "kill test"
  scripts/gpu-soak.sh --build "$BUILD" --out "$OUT" kill 2>&1 | tee -a "$LOG"
fi
# The soak: --with soak runs scripts/gpu-soak.sh soak (SOAK_SECONDS, 300 by default).
if [ "$HAVE_CLI" = 1 ] && on soak; then
  say "soak"
  scripts/gpu-soak.sh --build "$BUILD" --out "$OUT" soak 2>&1 | tee -a "$LOG"
fi
# First ticks on the GPU: the engine warmed on creation, and not.
if [ "$HAVE_CLI" = 1 ] && on first-ticks; then
  for warm in warm no-warm; do
    say "cuda first ticks, $warm"
    flag=(); [ $warm = no-warm ] && flag=(--no-warm)
    timeout 120 "$BUILD/hotpath" bench --model lstm_s --backend cuda --mode window --ticks 100000 --cpuset 2 "${flag[@]}" \
      --json "$OUT/cuda-first-ticks-$warm.json" 2>&1 | grep -E 'tick latency|ping-pong|first 10|error vs' | tee -a "$LOG"
  done
fi
# Throughput (docs/cuda.md): --with throughput runs scripts/throughput-bench.sh (hotpath and PyTorch side by
# side).
if [ "$HAVE_CLI" = 1 ] && on throughput; then
  say "throughput"
  scripts/throughput-bench.sh --build "$BUILD" --out "$OUT" --backends "$THROUGHPUT_BACKENDS" 2>&1 | tail -40 | tee -a "$LOG"
fi
# ---- end of hotpath bench section ------------------------------------------------------------------
# The CPU path's benchmarks, on this machine's Xeon.
if on cpu-bench; then
  scripts/cpu-bench.sh --out "$OUT" --ticks "$CPU_BENCH_TICKS" 2>&1 | tail -3 | tee -a "$LOG"
fi
say "done"
