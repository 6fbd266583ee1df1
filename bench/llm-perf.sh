#!/usr/bin/env bash
# The `hotpath llm bench` harness numbers in BENCHMARKS.md: what the measuring client adds to RT at
# 1-200 concurrent streams (accuracy against serve-sim's exactly known timing), its overhead at ~200
# streams, and the short-request rate it sustains on one core. The client and serve-sim run on
# separate pinned cores (CLIENT_CPU, SIM_CPU), so "one core" means the client had exactly one.
#   bench/llm-perf.sh [path/to/hotpath] [output dir]
# Env: CLIENT_CPU (default 0), SIM_CPU (default 1), BUSY=1 adds --busy-poll runs (dedicated cores only).
set -euo pipefail
H=${1:-./build/hotpath}
OUT=${2:-bench/results}
CLIENT_CPU=${CLIENT_CPU:-0}
SIM_CPU=${SIM_CPU:-1}
BUSY=${BUSY:-0}
PREFIX=${PREFIX:-llm}
mkdir -p "$OUT"
tmp=$(mktemp -d)
SIM=
cleanup() { [[ -n "$SIM" ]] && kill "$SIM" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

start_sim() {
  rm -f "$tmp/sim.out"  # else the wait below can read the previous server's line
  taskset -c "$SIM_CPU" "$H" llm serve-sim "$@" >"$tmp/sim.out" &
  SIM=$!
  for _ in $(seq 400); do grep -q listening "$tmp/sim.out" 2>/dev/null && break; sleep 0.05; done
  grep -q listening "$tmp/sim.out" || { echo "serve-sim did not start" >&2; exit 1; }
  URL=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$tmp/sim.out")
}
stop_sim() { kill -TERM "$SIM"; wait "$SIM" || true; SIM=; tail -1 "$tmp/sim.out"; }
bench() { taskset -c "$CLIENT_CPU" "$H" llm bench --endpoint "$URL" --model sim "$@"; }

# 1. Accuracy: serve-sim answers 50 ms after receipt, then a token every 10 ms (32 tokens). Batch
#    runs at 1, 16, 64 and 200 client slots; the bias is the measured RT (from the send) and IWL
#    minus the truth.
"$H" llm dataset synth --requests 200 --input-mean 32 --output-mean 32 --seed 3 --out "$tmp/acc.jsonl"
for busy in 0 $([[ "$BUSY" == 1 ]] && echo 1); do
  sim_flags=(); client_flags=(); tag=""
  [[ "$busy" == 1 ]] && { sim_flags=(--busy-poll); client_flags=(--busy-poll); tag="-busypoll"; }
  start_sim --ttft-ms 50 --tpot-ms 10 "${sim_flags[@]}"
  for c in 1 16 64 200; do
    n=$(( c * 8 > 40 ? c * 8 : 40 ))
    bench --dataset "$tmp/acc.jsonl" --mode batch --max-concurrency "$c" --requests "$n" --warmup "$c" \
      --ignore-eos --quiet "${client_flags[@]}" --json "$OUT/$PREFIX-accuracy-c$c$tag.json"
  done
  stop_sim
done

# 2. Harness overhead at ~200 concurrent streams: 150 req/s (Poisson) of 64-token streams lasting
#    ~1.3 s each (TTFT 50 ms, 20 ms per token). serve-sim stamps receipt and send times on the same
#    clock, so RT added by the client side = (server receipt - slot free) + (client stamp - server send).
#    Variants side by side: serve-sim sleeping or spinning (a spinning serve-sim takes its own wake-up
#    out of the figure, leaving the client's part and the loopback), the client sleeping, waking
#    --spin-us before each send, or spinning.
"$H" llm dataset synth --requests 200 --input-mean 64 --input-stdev 16 --output-mean 64 --seed 1 --out "$tmp/ovh.jsonl"
variants=("plain::" "simbusy:--busy-poll:")
[[ "$BUSY" == 1 ]] && variants+=("simbusy-spin100:--busy-poll:--spin-us 100" "busypoll:--busy-poll:--busy-poll")
for v in "${variants[@]}"; do
  IFS=: read -r tag simf clientf <<<"$v"
  start_sim --ttft-ms 50 --tpot-ms 20 $simf
  bench --dataset "$tmp/ovh.jsonl" --mode interactive --rate 150 --duration 20 --warmup 200 --ignore-eos --seed 1 \
    --quiet $clientf --json "$OUT/$PREFIX-overhead-200streams-$tag.json"
  stop_sim
done

# 3. Short-request throughput with the client on one core: 1-token answers, no server delay,
#    64 client slots, 50,000 requests.
"$H" llm dataset synth --requests 100 --input-mean 8 --output-mean 1 --seed 2 --out "$tmp/short.jsonl"
start_sim --ttft-ms 0 --tpot-ms 0
bench --dataset "$tmp/short.jsonl" --mode batch --max-concurrency 64 --requests 50000 --warmup 64 \
  --json "$OUT/$PREFIX-throughput-1core.json"
stop_sim

# 4. The platform's own floor: a loopback TCP round trip between two processes on the same two
#    cores, back to back and after 1 ms and 10 ms idle. RT crosses it twice.
tmpbin="$tmp/floor"
c++ -O2 -o "$tmpbin" "$(dirname "$0")/llm-loopback-floor.cpp"
for gap in 0 1000 10000; do taskset -c "$CLIENT_CPU,$SIM_CPU" "$tmpbin" "$gap"; done | tee "$OUT/$PREFIX-loopback-floor.txt"

# 5. One table of what matters, from the JSON above.
python3 - "$OUT" "$PREFIX" <<'PY'
import json, sys, glob, os
out, prefix = sys.argv[1], sys.argv[2]
def load(name):
    p = os.path.join(out, f"{prefix}-{name}.json")
    return json.load(open(p)) if os.path.exists(p) else None
print("accuracy (truth: TTFT 50 ms, IWL 10 ms)")
for tag in ("", "-busypoll"):
    for c in (1, 16, 64, 200):
        r = load(f"accuracy-c{c}{tag}")
        if not r: continue
        m = r["metrics"]
        ov = r.get("harness_overhead_us", {})
        print(f"  c={c:<4}{tag:10} completed {r['completed']:>5}  RT(send) p50 {m['rt_from_send_ms']['p50']-50:+.3f} ms"
              f"  p99 {m['rt_from_send_ms']['p99']-50:+.3f} ms  IWL p50 {m['iwl_ms']['p50']-10:+.4f} ms"
              f"  harness overhead p50 {ov.get('p50', float('nan')):.1f} us")
for tag in ("-plain", "-simbusy", "-simbusy-spin100", "-busypoll"):
    r = load(f"overhead-200streams{tag}")
    if not r: continue
    ov, parts = r["harness_overhead_us"], r["harness_overhead_parts_us"]
    print(f"overhead at ~200 streams{tag}: p50 {ov['p50']:.1f} us p99 {ov['p99']:.1f} us"
          f" (slot->server p50 {parts['slot_to_server']['p50']:.1f}, server->stamp p50 {parts['server_to_stamp']['p50']:.1f});"
          f" send lag p50 {r['metrics']['send_lag_ms']['p50']*1000:.1f} us;"
          f" client {r['client']['cpu_utilization']*100:.0f}% busy, completed {r['completed']}")
r = load("throughput-1core")
if r:
    print(f"short requests on one core: {r['rps']:.0f} req/s, client {r['client']['cpu_utilization']*100:.0f}% busy,"
          f" {r['client']['cpu_us_per_request']:.1f} us CPU/request, failed {r['failed']}")
PY
