#!/usr/bin/env bash
# The throughput benchmarks (docs/cuda.md, "Throughput") on the GPU machine, side by side in one run:
# hotpath's `bench --mode backtest | backtest-streaming | fresh` per zoo model on each backend given, and
# bench/pytorch_throughput.py (nn.LSTM: cuDNN on the GPU, PyTorch's CPU kernels on the same cores); on the
# GPU both with inputs from host memory and already in GPU memory (hotpath --device-arrays, PyTorch
# --inputs both), so that every ratio compares the same thing.
#   scripts/throughput-bench.sh [--build DIR] [--out DIR] [--backends "cpu cuda"]
#     --build DIR   the built tree (default build-gpu)     --out DIR   results (default $OUT, else gpu-out)
#     --backends    the backends run, "cpu cuda" by default
#   (the form recorded before the flags, scripts/throughput-bench.sh BUILD_DIR OUT_DIR [BACKENDS], still works)
# Cores: 0-1 left to the OS; the CPU runs use 2-15 (14 cores) for hotpath and PyTorch alike.
# JSON per run under OUT_DIR/throughput/, one log line per run in OUT_DIR/throughput.log.
set -u -o pipefail
cd "$(dirname "$0")/.."
SCRIPT=throughput-bench.sh
. scripts/lib/flags.sh
BUILD=build-gpu
OUT=${OUT:-gpu-out}
BACKENDS="cpu cuda"
FLAGS=(--build:BUILD --out:OUT --backends:BACKENDS)
flag_parse 10 "$@"
[ ${#pos[@]} -gt 3 ] && flag_die "at most BUILD_DIR OUT_DIR BACKENDS without flags"
[ ${#pos[@]} -ge 1 ] && BUILD=${pos[0]}
[ ${#pos[@]} -ge 2 ] && OUT=${pos[1]}
[ ${#pos[@]} -ge 3 ] && BACKENDS=${pos[2]}
MODELS=${MODELS:-lstm_s lstm_m lstm_l nv_small nv_medium nv_large vollo_tiny vollo_large}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-3}
R="$OUT/throughput"
mkdir -p "$R"
LOG="$OUT/throughput.log"
say() { echo "$*" | tee -a "$LOG"; }
NCPU=$(nproc)
CORES=2-$((NCPU - 1))
[ "$NCPU" -lt 4 ] && CORES=0-$((NCPU - 1))

for backend in $BACKENDS; do
  for m in $MODELS; do
    W=$("$BUILD/hotpath" models | awk -v m="$m" '$1 == m { print $6 }')
    # W = 1 (the vollo shapes): every window is one step from zero state; streaming is the other case.
    modes="backtest fresh"; [ "$W" = 1 ] && modes="backtest backtest-streaming"
    for mode in $modes; do
      extra=(--seconds "$SECONDS_PER_RUN")
      [ "$mode" = backtest-streaming ] && extra+=(--batch 1024)
      [ "$mode" = fresh ] && extra+=(--batch 4096)
      [ "$backend" = cpu ] && extra+=(--cpuset "$CORES")
      # cuda: the inputs from host memory (as a caller's arrays), then already in GPU memory (--device-arrays),
      # the two ways PyTorch runs below too
      arrays="host"; [ "$backend" = cuda ] && arrays="host device"
      for a in $arrays; do
        tag=$backend-$m-$mode; [ "$a" = device ] && tag+=-device-arrays
        dev=(); [ "$a" = device ] && dev=(--device-arrays)
        timeout 300 "$BUILD/hotpath" bench --model "$m" --backend "$backend" --mode "$mode" "${extra[@]}" "${dev[@]}" \
          --json "$R/$tag.json" >"$R/$tag.txt" 2>&1
        rc=$?
        say "$backend $m $mode ($a arrays) rc=$rc $(grep -E 'rate|error' "$R/$tag.txt" | tr -s ' ' | tr '\n' ' ')"
      done
    done
  done
done

# The cuda backend's fresh windows one at a time (B = 1: latency per request), and its chunk size side
# by side (--batch-rows; the default is printed in the JSON's counters).
if [[ " $BACKENDS " == *" cuda "* ]]; then
  j="$R/cuda-lstm_s-fresh-b1.json"
  timeout 120 "$BUILD/hotpath" bench --model lstm_s --backend cuda --mode fresh --batch 1 --seconds "$SECONDS_PER_RUN" \
    --json "$j" >"$R/cuda-lstm_s-fresh-b1.txt" 2>&1
  say "cuda lstm_s fresh B=1 rc=$? $(grep -E 'rate|per call|error' "$R/cuda-lstm_s-fresh-b1.txt" | tr -s ' ' | tr '\n' ' ')"
  for m in ${ROWS_MODELS:-lstm_s lstm_l}; do
    for rows in ${ROWS_VARIANTS:-4224 16896}; do
      j="$R/cuda-$m-backtest-rows$rows.json"
      timeout 120 "$BUILD/hotpath" bench --model "$m" --backend cuda --mode backtest --batch-rows "$rows" \
        --seconds "$SECONDS_PER_RUN" --json "$j" >"$R/cuda-$m-backtest-rows$rows.txt" 2>&1
      say "cuda $m backtest rows=$rows rc=$? $(grep -E 'rate|error' "$R/cuda-$m-backtest-rows$rows.txt" | tr -s ' ' | tr '\n' ' ')"
    done
  done
fi

# PyTorch on the same shapes: the GPU (fp16, cuDNN) and the CPU (fp32) on the same cores.
PY=${PYTHON:-python3}
if $PY -c 'import torch' 2>/dev/null; then
  for backend in $BACKENDS; do
    if [ "$backend" = cuda ]; then
      timeout 900 $PY bench/pytorch_throughput.py --hotpath "$BUILD/hotpath" --device cuda --models "${MODELS// /,}" \
        --inputs both --json "$R/pytorch-cuda.json" 2>&1 | tee -a "$LOG"
    else
      timeout 600 taskset -c "$CORES" $PY bench/pytorch_throughput.py --hotpath "$BUILD/hotpath" --device cpu \
        --threads $((NCPU >= 4 ? NCPU - 2 : NCPU)) --batches 256,1024,4096 --models "${CPU_TORCH_MODELS:-${MODELS// /,}}" \
        --json "$R/pytorch-cpu.json" 2>&1 | tee -a "$LOG"
    fi
  done
else
  say "pytorch: not importable here; its comparison was not run"
fi
say "throughput done"
