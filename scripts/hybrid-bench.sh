#!/usr/bin/env bash
# The hybrid backend's benchmarks on the GPU machine (docs/hybrid.md): every kernel variant side by side on
# the same host, with the cpu backend beside them, each a `hotpath bench --json` run; JSON and logs under OUT
# (one tarball, hybrid-bench.tgz, plus the log).
#   scripts/hybrid-bench.sh [--build DIR] [--hotpath BIN] [--out DIR] [--ticks N] [--models "M ..."] [--tunes "T ..."]
#     --build DIR    the CUDA tree (default build-gpu, the `gpu` preset; built here unless --hotpath)
#     --hotpath BIN  a hotpath binary already built (nothing is built then)
#     --out DIR      results (default $OUT, else gpu-out)   --ticks N   ticks a run (default 200000)
#     --models "M ..."   zoo models, window mode, int8 (default "lstm_m stac_b")
#     --tunes "T ..."    the HOTPATH_HYBRID_TUNE variants run beside the default (default: each knob's other
#                        value, the earlier default whole, the staging shared over clusters of 2, 4 and 8)
# Cores, from nproc: 0-1 left to the OS; the hybrid's critical step on 2-5 (--crit-cores 4), the cpu
# backend's on the same cores with its precompute on 6 to the last.
# Runs per model: the default kernel, each HOTPATH_HYBRID_TUNE variant, the fp32 form, x_t sent after the
# step, the cpu backend; the first again at the end (the host's drift over the sweep).
set -u -o pipefail
cd "$(dirname "$0")/.."
SCRIPT=hybrid-bench.sh
. scripts/lib/flags.sh
BUILD=build-gpu
HOTPATH=
OUT=${OUT:-gpu-out}
TICKS=200000
MODELS="lstm_m stac_b"
TUNES="rows=2 fence=block barrier=fence input=feeder last=whole rows=2,fence=block,barrier=fence,input=feeder cluster=2 cluster=4 cluster=8 stage=loads products=fp16"
FLAGS=(--build:BUILD --hotpath:HOTPATH --out:OUT --ticks:TICKS:count --models:MODELS --tunes:TUNES)
flag_parse 15 "$@"
[ ${#pos[@]} -eq 0 ] || flag_die "unknown argument '${pos[0]}' (--help lists them)"
NCPU=$(nproc)
[ "$NCPU" -ge 8 ] || flag_die "needs 8 cores or more (0-1 for the OS, 2-5 critical, 6.. precompute); this machine has $NCPU"
R="$OUT/hybrid-bench"
mkdir -p "$R"
LOG="$OUT/hybrid-bench.log"
say() { echo "$*" | tee -a "$LOG"; }
pack() { tar czf "$OUT/hybrid-bench.tgz" -C "$OUT" hybrid-bench; }

if [ -z "$HOTPATH" ]; then
  cmake --preset gpu -B "$BUILD" >>"$LOG" 2>&1 || { say "configure FAILED"; exit 1; }
  ninja -C "$BUILD" hotpath >>"$LOG" 2>&1 || { say "build FAILED"; grep -E 'error' "$LOG" | head -20; exit 1; }
  HOTPATH=$BUILD/hotpath
fi
[ -x "$HOTPATH" ] || flag_die "no hotpath binary at '$HOTPATH'"
{ lscpu | grep -E 'Model name|^CPU\(s\)|L2'; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } >>"$LOG" 2>&1

bench() {  # bench NAME CPUSET CRIT BACKEND MODEL, then environment assignments
  local name=$1 cpuset=$2 crit=$3 backend=$4 model=$5
  shift 5
  env "$@" timeout 300 "$HOTPATH" bench --backend "$backend" --model "$model" --precision int8 --mode window \
    --cpuset "$cpuset" --crit-cores "$crit" --ticks "$TICKS" --warmup 5000 --check-every 64 \
    --json "$R/$name.json" >"$R/$name.txt" 2>&1
  local rc=$?
  say "$(printf '%-34s rc=%-3s' "$name" "$rc") $(grep -E '^tick latency|^sustainable' "$R/$name.txt" | tr -s ' ' | tr '\n' ' ')"
  grep -E 'error vs float64' "$R/$name.txt" | tail -1 >>"$LOG"
  pack
}
HY=2-5
CPU=2-$((NCPU - 1))
for m in $MODELS; do
  bench "$m-hybrid-default" $HY 4 hybrid "$m"
  for tune in $TUNES; do
    bench "$m-hybrid-${tune//[=,]/-}" $HY 4 hybrid "$m" HOTPATH_HYBRID_TUNE="$tune"
  done
  bench "$m-hybrid-fp32" $HY 4 hybrid "$m" HOTPATH_HYBRID_PRECOMPUTE=fp32
  bench "$m-hybrid-late" $HY 4 hybrid "$m" HOTPATH_HYBRID_SEND=late
  bench "$m-cpu" "$CPU" 4 cpu "$m"
  bench "$m-hybrid-default-again" $HY 4 hybrid "$m"
done
say "hybrid-bench done: $R"
