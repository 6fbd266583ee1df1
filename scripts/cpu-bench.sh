#!/usr/bin/env bash
# The CPU path's benchmarks on the GPU machine's Xeon: builds the CPU-only tree, runs the
# cpu tests, the critical-step micro-benchmark with its hardware counters under each tuning variant
# side by side, and the standard `hotpath bench` runs (fp32 / bf16 / int8). Results under OUT_DIR
# (one tarball, cpu-bench.tgz, plus the log).
#   scripts/cpu-bench.sh [--build DIR] [--out DIR] [--ticks N]
#     --build DIR   the CPU-only tree (default build-cpu, the `cpu` preset)
#     --out DIR     results (default $OUT, else gpu-out)   --ticks N   ticks a run (default 200000)
#   (the form recorded before the flags, scripts/cpu-bench.sh OUT_DIR [TICKS], still works; BUILD=DIR too)
# Cores, from nproc: 0-1 left to the OS, the critical step on 2, the precompute on 3 to the last but one
# (3-14 on the lent machine's 16; the last stays free for the shell and the logging), as gpu-bench.sh.
set -u -o pipefail
cd "$(dirname "$0")/.."
SCRIPT=cpu-bench.sh
. scripts/lib/flags.sh
BUILD=${BUILD:-build-cpu}
OUT=${OUT:-gpu-out}
TICKS=200000
FLAGS=(--build:BUILD --out:OUT --ticks:TICKS:count)
flag_parse 11 "$@"
[ ${#pos[@]} -gt 2 ] && flag_die "at most OUT_DIR TICKS without flags"
[ ${#pos[@]} -ge 1 ] && OUT=${pos[0]}
[ ${#pos[@]} -ge 2 ] && { flag_count TICKS "${pos[1]}"; TICKS=${pos[1]}; }
NCPU=$(nproc)
[ "$NCPU" -ge 6 ] || { echo "cpu-bench.sh: needs 6 cores or more (0-1 for the OS, 2 critical, 3.. precompute); this machine has $NCPU" >&2; exit 2; }
CORES="2,3-$((NCPU - 2))"  # critical core, then the precompute workers
W4=$(( NCPU - 2 < 6 ? NCPU - 2 : 6 ))  # the 4-worker run: 3-6 where there are 4 such cores
R="$BUILD/cpu-bench"
mkdir -p "$OUT" "$R"
LOG="$OUT/cpu-bench.log"
say() { echo "$*" | tee -a "$LOG"; }
pack() { tar czf "$OUT/cpu-bench.tgz" -C "$BUILD" cpu-bench; }

{ lscpu | grep -E 'Model name|^CPU\(s\)|MHz|L1d|L2|L3'; cat /sys/kernel/mm/transparent_hugepage/enabled;
  echo "perf_event_paranoid $(cat /proc/sys/kernel/perf_event_paranoid)"; } >>"$LOG" 2>&1
cmake --preset cpu -B "$BUILD" >>"$LOG" 2>&1 || { say "configure FAILED"; exit 1; }
ninja -C "$BUILD" hotpath bench/bench_critical_step tests/cpu/test_cpu_backend >>"$LOG" 2>&1 \
  || { say "build FAILED"; grep -E 'error' "$LOG" | head -20; exit 1; }
say "built"

if [ "${CPU_TESTS:-1}" = 1 ]; then
  timeout 300 "$BUILD/tests/cpu/test_cpu_backend" >"$R/cpu-tests.log" 2>&1
  say "cpu tests rc=$? $(tail -1 "$R/cpu-tests.log")"
  grep -E '^\[int8\]|^\[golden\]' "$R/cpu-tests.log" | tee -a "$LOG"
fi

# The critical step alone, each tuning variant in turn (same process per variant, fixed iterations).
FILTER=${FILTER:-'lstm_s/window|vollo_tiny/streaming|lstm_s/streaming|lstm_m/window/int8'}
variant() {  # name, then environment assignments
  local name=$1; shift
  say "== critical step, $name: $*"
  env "$@" timeout 300 "$BUILD/bench/bench_critical_step" --cpuset="$CORES" --benchmark_filter="$FILTER" \
    --benchmark_out="$R/critical-$name.json" --benchmark_out_format=json >"$R/critical-$name.txt" 2>&1
  grep -E 'critical_step|counters' "$R/critical-$name.txt" | sed 's/iterations:[0-9]*\/manual_time//' | tee -a "$LOG"
  pack
}
variant default
variant act8 HOTPATH_CPU_INT8_ACT=8
variant no-hugepages HOTPATH_CPU_HUGEPAGES=0
[ "${ALL_VARIANTS:-0}" = 1 ] && { variant no-prefetch HOTPATH_CPU_PREFETCH=0; variant no-rewarm HOTPATH_CPU_REWARM=0; }

# The standard runs through the CLI: tick latency from due to answer, error checked against float64.
run() {  # name, then hotpath arguments (environment assignments before `run` apply to it)
  local name=$1; shift
  say "== $name: hotpath $*"
  timeout 200 "$BUILD/hotpath" "$@" --json "$R/$name.json" 2>&1 | tail -14 | tee -a "$LOG"
  pack
}
for p in fp32 bf16 int8; do
  run "lstm_s_window_$p" bench --model lstm_s --backend cpu --precision $p --mode window --ticks "$TICKS" --cpuset "$CORES"
  run "vollo_tiny_streaming_$p" bench --model vollo_tiny --backend cpu --precision $p --mode streaming \
    --ticks "$TICKS" --cpuset "$CORES"
done
# 8-bit activations (faster, not within the int8 bound in general: the run says whether it is here)
HOTPATH_CPU_INT8_ACT=8 run lstm_s_window_int8_act8 bench --model lstm_s --backend cpu --precision int8 --mode window \
  --ticks "$TICKS" --cpuset "$CORES"
HOTPATH_CPU_INT8_ACT=8 run vollo_tiny_streaming_int8_act8 bench --model vollo_tiny --backend cpu --precision int8 \
  --mode streaming --ticks "$TICKS" --cpuset "$CORES"
# The first ticks of an engine not warmed on creation
run lstm_s_window_int8_nowarm bench --model lstm_s --backend cpu --precision int8 --mode window --ticks 20000 \
  --cpuset "$CORES" --no-warm
run vollo_tiny_streaming_int8_nowarm bench --model vollo_tiny --backend cpu --precision int8 --mode streaming \
  --ticks 20000 --cpuset "$CORES" --no-warm
# The precompute workers against the critical core: the same run on 1, 4 and (above) 12 workers
run lstm_s_window_int8_w1 bench --model lstm_s --backend cpu --precision int8 --mode window --ticks $((TICKS / 4)) --cpuset 2,3
run lstm_s_window_int8_w4 bench --model lstm_s --backend cpu --precision int8 --mode window --ticks $((TICKS / 4)) --cpuset "2,3-$W4"
[ "${LSTM_M:-1}" = 1 ] && run lstm_m_window_int8 bench --model lstm_m --backend cpu --precision int8 --mode window \
  --ticks $((TICKS / 8)) --cpuset "$CORES"
say "done"
