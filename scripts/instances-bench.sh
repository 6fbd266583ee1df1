#!/usr/bin/env bash
# Many instances on one GPU (docs/cuda.md), one device call: builds (Release), runs the instance tests (SM
# partitions, one engine each, driven at once, checked against float64; faults of one leave the others
# running), then `hotpath bench --instances N` for the scaling table and the backtest beside 8 live
# instances. Logs and JSON go under $OUT (default ./gpu-out).
#
#   scripts/instances-bench.sh
#   TESTS=0 / BENCH=0     skip the tests / the benchmarks
#   RUNS="lstm_s:1,2,4,8,16 nv_small:1,8"   model:instance counts   TICKS=20000 (measured ticks per instance)
#   BESIDE=0              skip the backtest-beside runs
#   ISOLATIONS="green shared"   the mechanisms measured (each run of the table once per mechanism)
#   ARGS="--placement block" TAG=-block   extra bench arguments, and a suffix for the runs' file names
#   SANITIZE=1            also run the shared-launch tests once under compute-sanitizer (memcheck, racecheck)
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
BUILD=${BUILD_DIR:-$PWD/build-gpu}
mkdir -p "$OUT"
LOG=$OUT/instances.log
say() { echo "== $*" | tee -a "$LOG"; }
. scripts/lib/gpu-guard.sh
: >"$LOG"
export PATH=/usr/local/cuda/bin:$PATH
say "build"
# A build folder that exists (gpu-check.sh's) is used as configured.
[ -f "$BUILD/build.ninja" ] || cmake --preset gpu -B "$BUILD" >>"$LOG" 2>&1
ninja -C "$BUILD" -j"$(nproc)" hotpath test_cuda_backend >>"$LOG" 2>&1 || { say "build FAILED"; grep -E 'error' "$LOG" | head -20; exit 1; }
HP=$BUILD/hotpath
say "spills of the persistent kernels (ptxas)"
grep -E 'Compiling entry|spill' "$LOG" | grep -A1 -E 'lstm_persistent|lstm_multi|lstm_cluster' | grep -B1 -E '[1-9][0-9]* bytes spill' | head -12 | tee -a "$LOG"
TIMEOUT=${TIMEOUT:-240}

# Runs a command with a deadline in its own process group; past it, the stacks of every host thread
# (cuda-gdb attaches), then the whole group is killed (a sanitizer's target process with it).
watched() {
  local name=$1; shift
  local others; others=$(gpu_others)
  [ -n "$others" ] && say "$name: other processes hold the GPU (pids $others): this run's latencies are void"
  setsid "$@" >"$OUT/$name.log" 2>&1 &
  local pid=$! waited=0
  while kill -0 $pid 2>/dev/null && [ $waited -lt "$TIMEOUT" ]; do sleep 1; waited=$((waited + 1)); done
  if kill -0 $pid 2>/dev/null; then
    say "$name: still running after $TIMEOUT s: host stacks in $name.stacks"
    timeout 60 cuda-gdb -batch -p $pid -ex "thread apply all bt" >"$OUT/$name.stacks" 2>&1
    kill -9 -- -$pid
  fi
  wait $pid; local rc=$?
  kill -9 -- -$pid 2>/dev/null
  say "$name: rc=$rc"; tail -5 "$OUT/$name.log" | tee -a "$LOG"
  return $rc
}

if [ "${TESTS:-1}" = 1 ]; then
  say "instance tests"
  HOTPATH_TEST_TRACE=1 watched tests "$BUILD/tests/cuda/test_cuda_backend" --gtest_also_run_disabled_tests --gtest_filter='SmPartitions*:SharedLaunch*'
  if [ "${SANITIZE:-0}" = 1 ]; then
    for tool in memcheck racecheck; do
      HOTPATH_TEST_INSTANCES=2 watched "sanitizer-$tool" compute-sanitizer --tool $tool \
        "$BUILD/tests/cuda/test_cuda_backend" --gtest_filter='SharedLaunch.InstancesOfOneLaunch*'
    done
  fi
fi

if [ "${BENCH:-1}" = 1 ]; then
  TICKS=${TICKS:-20000}
  for run in ${RUNS:-lstm_s:1,2,4,8,16,32,64 nv_small:1,2,4,8,16,64 lstm_m:1,2,4}; do
    model=${run%%:*}
    for n in $(echo "${run#*:}" | tr , ' '); do
      ce=$((16 * n)); [ $ce -gt 256 ] && ce=256
      for iso in ${ISOLATIONS:-green shared}; do
        watched "$model-$iso-$n${TAG:-}" "$HP" bench --model "$model" --backend cuda --instances "$n" --isolation "$iso" \
          --ticks "$TICKS" --warmup 2000 --check-every "$ce" --cpuset "0-$(( $(nproc) - 1 ))" ${ARGS:-} --json "$OUT/$model-$iso-$n${TAG:-}.json"
      done
    done
  done
  if [ "${BESIDE:-1}" = 1 ]; then
    for iso in ${ISOLATIONS:-green shared}; do
      watched "lstm_s-$iso-8-beside${TAG:-}" "$HP" bench --model lstm_s --backend cuda --instances 8 --isolation "$iso" \
        --beside-backtest --ticks "$TICKS" --warmup 2000 --check-every 128 --cpuset "0-$(( $(nproc) / 2 - 1 ))" ${ARGS:-} --json "$OUT/lstm_s-$iso-8-beside${TAG:-}.json"
    done
  fi
fi
say "done"
[ "${TAR:-1}" = 1 ] && tar -czf "$OUT/instances-logs.tgz" -C "$OUT" --exclude instances-logs.tgz . 2>/dev/null
