#!/usr/bin/env bash
# Reproduces the `hotpath llm bench` harness numbers in BENCHMARKS.md. The client is pinned to CPU 0
# and serve-sim to CPU 1, so "one core" means the client had exactly one.
#   bench/results/llm-perf.sh [path/to/hotpath] [output dir]
set -euo pipefail
H=${1:-./build/hotpath}
OUT=${2:-bench/results}
tmp=$(mktemp -d)
SIM=
cleanup() { [[ -n "$SIM" ]] && kill "$SIM" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

start_sim() {
  rm -f "$tmp/sim.out"  # else the wait below can read the previous server's line
  taskset -c 1 "$H" llm serve-sim "$@" >"$tmp/sim.out" &
  SIM=$!
  for _ in $(seq 400); do grep -q listening "$tmp/sim.out" 2>/dev/null && break; sleep 0.05; done
  grep -q listening "$tmp/sim.out" || { echo "serve-sim did not start" >&2; exit 1; }
  URL=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$tmp/sim.out")
}
stop_sim() { kill -TERM "$SIM"; wait "$SIM" || true; SIM=; tail -1 "$tmp/sim.out"; }

# 1. Harness overhead at ~200 concurrent streams: 150 req/s (Poisson) of 64-token streams lasting
#    ~1.3 s each (TTFT 50 ms, 20 ms per token). serve-sim stamps receipt and send times on the same
#    clock, so RT added by the client side = (server receipt - slot free) + (client stamp - server send).
"$H" llm dataset synth --requests 200 --input-mean 64 --input-stdev 16 --output-mean 64 --seed 1 --out "$tmp/ovh.jsonl"
start_sim --ttft-ms 50 --tpot-ms 20
taskset -c 0 "$H" llm bench --endpoint "$URL" --model sim --dataset "$tmp/ovh.jsonl" --mode interactive \
  --rate 150 --duration 20 --warmup 200 --ignore-eos --seed 1 --json "$OUT/llm-overhead-200streams.json"
stop_sim

# 2. Short-request throughput with the client on one core: 1-token answers, no server delay,
#    64 client slots, 20,000 requests.
"$H" llm dataset synth --requests 100 --input-mean 8 --output-mean 1 --seed 2 --out "$tmp/short.jsonl"
start_sim --ttft-ms 0 --tpot-ms 0
taskset -c 0 "$H" llm bench --endpoint "$URL" --model sim --dataset "$tmp/short.jsonl" --mode batch \
  --max-concurrency 64 --requests 20000 --warmup 64 --json "$OUT/llm-throughput-1core.json"
stop_sim

# 3. The platform's own floor: a loopback TCP round trip between two processes, back to back and
#    after 1 ms and 10 ms idle (idle vCPUs of a VM wake slowly). RT crosses it twice.
tmpbin="$tmp/floor"
c++ -O2 -o "$tmpbin" "$(dirname "$0")/llm-loopback-floor.cpp"
for gap in 0 1000 10000; do "$tmpbin" "$gap"; done
