#!/usr/bin/env bash
# The standard benchmarks and golden checks through the `hotpath` CLI, on the GPU machine.
#   scripts/gpu-bench.sh [--build DIR] [--out DIR] [--ticks N]
#     --build DIR   the built tree (default build-gpu)     --out DIR   results (default $OUT, else gpu-out)
#     --ticks N     ticks a run (default 1000000)
#   (the form recorded before the flags, scripts/gpu-bench.sh BUILD_DIR OUT_DIR [TICKS], still works)
# Writes one JSON per run under OUT_DIR/bench/ and a summary table to stdout. Called by gpu-check.sh.
set -u -o pipefail
SCRIPT=gpu-bench.sh
. "$(dirname "$0")/lib/flags.sh"
BUILD=build-gpu
OUT=${OUT:-gpu-out}
TICKS=1000000
FLAGS=(--build:BUILD --out:OUT --ticks:TICKS:count)
flag_parse 7 "$@"
[ ${#pos[@]} -gt 3 ] && flag_die "at most BUILD_DIR OUT_DIR TICKS without flags"
[ ${#pos[@]} -ge 1 ] && BUILD=${pos[0]}
[ ${#pos[@]} -ge 2 ] && OUT=${pos[1]}
[ ${#pos[@]} -ge 3 ] && { flag_count TICKS "${pos[2]}"; TICKS=${pos[2]}; }
HP="$BUILD/hotpath"
# The JSON files gather in $BUILD/bench and are archived into $OUT/bench.tgz after every run: one file to
# carry away, and a run cut short still leaves what finished.
R="$BUILD/bench"
rm -rf "$R"
mkdir -p "$OUT" "$R"
GOLDEN=${GOLDEN_DIR:-tests/data/golden}
# Core 0 takes the OS's interrupts; the critical step gets its own core, the precompute the next ones up to
# the last but one (3-14 on the lent machine's 16 cores), from nproc.
CRIT=2
NCPU=$(nproc)
[ "$NCPU" -ge 5 ] || { echo "gpu-bench.sh: needs 5 cores or more (2 critical, 3.. precompute); this machine has $NCPU" >&2; exit 2; }
PRE="3-$((NCPU - 2))"

run() {  # name, then hotpath arguments
  local name=$1; shift
  echo "== $name: hotpath $*"
  timeout "${RUN_TIMEOUT:-150}" "$HP" "$@" --json "$R/$name.json" 2>&1 | tail -12
  echo "   exit ${PIPESTATUS[0]}"
  tar czf "$OUT/bench.tgz" -C "$BUILD" bench
}

echo "== golden cases (verify: every backend and precision, both modes)"
for g in "$GOLDEN"/*.model.safetensors; do
  n=$(basename "$g" .model.safetensors)
  for bp in "ref" "cpu --precision fp32" "cpu --precision bf16" "cuda --precision fp16" "cuda --precision bf16"; do
    echo "-- $n $bp"; "$HP" verify --model "$g" --golden "$GOLDEN/$n.golden.safetensors" --backend $bp
  done
done
if [ "${TORCH_CASE:-1}" = 1 ] && python3 -c "import torch, safetensors" 2>/dev/null; then
  echo "== a fresh PyTorch case (encoder.rnn./head. prefixes, I=20 H=96 L=3 O=3 W=17) saved with python/hotpath_export.py"
  python3 python/make_golden.py "$OUT/torchcase" && for bp in "ref" "cpu --precision fp32" "cpu --precision bf16" "cuda"; do
    "$HP" verify --model "$OUT/torchcase/case.model.safetensors" --golden "$OUT/torchcase/case.golden.safetensors" --backend $bp
  done
  rm -rf "$OUT/torchcase"
fi

run pingpong_32 bench --pingpong --floats 32 --ticks "$TICKS" --cpuset $CRIT
run cuda_lstm_s_window_fp16 bench --model lstm_s --backend cuda --precision fp16 --mode window --ticks "$TICKS" --cpuset $CRIT
run cuda_lstm_s_window_fp16_smem bench --model lstm_s --backend cuda --variant smem --precision fp16 --mode window --ticks $((TICKS / 4)) --cpuset $CRIT
run cuda_lstm_s_window_bf16 bench --model lstm_s --backend cuda --precision bf16 --mode window --ticks "$TICKS" --cpuset $CRIT
# Streaming checks need every tick through the float64 reference in order (one thread): a quarter of
# the ticks keeps the run near a minute.
run cuda_vollo_tiny_streaming_fp16 bench --model vollo_tiny --backend cuda --precision fp16 --mode streaming --ticks $((TICKS / 4)) --cpuset $CRIT
if [ "${BENCH_CPU:-1}" = 1 ]; then
# The CPU's window-mode tick rate is bounded by its precompute (W-1 windows advanced per tick), so
# fewer ticks there keep the whole script inside one device call.
run cpu_lstm_s_window_bf16 bench --model lstm_s --backend cpu --precision bf16 --mode window --ticks $((TICKS / 10)) --cpuset $CRIT,$PRE
run cpu_lstm_s_window_fp32 bench --model lstm_s --backend cpu --precision fp32 --mode window --ticks $((TICKS / 10)) --cpuset $CRIT,$PRE
run cpu_vollo_tiny_streaming_bf16 bench --model vollo_tiny --backend cpu --precision bf16 --mode streaming --ticks $((TICKS / 4)) --cpuset $CRIT,$PRE
run cpu_lstm_m_window_bf16 bench --model lstm_m --backend cpu --precision bf16 --mode window --ticks $((TICKS / 40)) --cpuset $CRIT,$PRE
run cpu_lstm_m_window_fp32 bench --model lstm_m --backend cpu --precision fp32 --mode window --ticks $((TICKS / 40)) --cpuset $CRIT,$PRE
else
  echo "== cpu runs skipped (BENCH_CPU=0)"
fi

echo "== summary (us)"
python3 - "$R" <<'PY'
import json, os, sys
d = sys.argv[1]
print(f"{'run':34} {'p50':>7} {'p90':>7} {'p99':>7} {'p99.9':>7} {'max':>8} {'rate/s':>9} {'error':>9} {'pp p99':>7}")
for f in sorted(os.listdir(d)):
    j = json.load(open(os.path.join(d, f)))
    lat = j.get("latency_us") or j.get("pingpong", {}).get("latency_us", {})
    pp = j.get("pingpong", {}).get("latency_us", {}).get("p99", float("nan"))
    err = j.get("error", {}).get("normalized", float("nan"))
    print(f"{f[:-5]:34} {lat.get('p50',0):7.2f} {lat.get('p90',0):7.2f} {lat.get('p99',0):7.2f} {lat.get('p999',0):7.2f} "
          f"{lat.get('max',0):8.1f} {j.get('tick_rate_hz',0):9.0f} {err:9.2e} {pp:7.2f}")
PY

tar czf "$OUT/bench.tgz" -C "$BUILD" bench
