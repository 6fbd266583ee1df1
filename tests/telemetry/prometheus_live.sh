#!/usr/bin/env bash
# A live run scraped by a real Prometheus server: `hotpath bench --metrics-port` serves its tick
# telemetry while a Prometheus started here on 127.0.0.1 scrapes it every second; Prometheus's query API
# is then asked for the run's tick count and p99 (histogram_quantile over the exported buckets), and
# they are compared with the run's JSON: the count exactly, the p99 within the histogram's bucket width
# (buckets are at most 2^(1/4) wide: the exact p99 and PromQL's interpolation lie in the same bucket).
# Skips (exit 77, ctest's SKIP_RETURN_CODE) where the prometheus server is absent (Debian's prometheus
# package, which scripts/setup.sh installs when it can).
#   tests/telemetry/prometheus_live.sh HOTPATH_BINARY
set -euo pipefail
hotpath="${1:?usage: prometheus_live.sh HOTPATH_BINARY}"
if ! command -v prometheus >/dev/null; then
  echo "SKIPPED: the prometheus server is not installed (apt install prometheus): no live scrape tested"
  exit 77
fi
work=$(mktemp -d)
prom_pid=""
cleanup() {
  if [ -n "$prom_pid" ]; then kill "$prom_pid" 2>/dev/null || true; wait "$prom_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
metrics_port=$(free_port)
web_port=$(free_port)
cat > "$work/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: hotpath
    static_configs:
      - targets: ["127.0.0.1:$metrics_port"]
YML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="127.0.0.1:$web_port" > "$work/prometheus.log" 2>&1 &
prom_pid=$!
api="http://127.0.0.1:$web_port"
for _ in $(seq 1 100); do
  if python3 -c "import urllib.request,sys; urllib.request.urlopen('$api/-/ready', timeout=1)" 2>/dev/null; then break; fi
  if ! kill -0 "$prom_pid" 2>/dev/null; then echo "FAIL: prometheus exited"; cat "$work/prometheus.log"; exit 1; fi
  sleep 0.2
done
# A paced run of a few seconds, then the final counts held for a few scrapes.
"$hotpath" bench --model lstm_s --backend cpu --mode window --window 20 --rate 1000 --seconds 4 --warmup 200 \
  --metrics-port "$metrics_port" --metrics-hold-s 4 --no-progress --json "$work/run.json" > "$work/run.log" 2>&1 \
  || { echo "FAIL: the bench run failed"; cat "$work/run.log"; exit 1; }
python3 - "$api" "$work/run.json" <<'PY'
import json, sys, time, urllib.parse, urllib.request
api, report = sys.argv[1], json.load(open(sys.argv[2]))
def query(path, **params):
    with urllib.request.urlopen(api + path + "?" + urllib.parse.urlencode(params), timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]
count = report["count"]
now = time.time()
# The instant the scraped count reached the run's: its final counts, held after the run.
series = query("/api/v1/query_range", query='hotpath_tick_latency_seconds_count{engine="0"}',
               start=now - 120, end=now, step=0.5)
assert series, "Prometheus scraped no hotpath_tick_latency_seconds_count"
final = [float(t) for t, v in series[0]["values"] if int(float(v)) == count]
assert final, f"no scrape saw the run's count {count}: {series[0]['values'][-5:]}"
at = final[0]
p99 = query("/api/v1/query", query='histogram_quantile(0.99, hotpath_tick_latency_seconds_bucket{engine="0"})', time=at)
promql_p99_us = float(p99[0]["value"][1]) * 1e6
json_p99_us = report["latency_us"]["p99"]
ratio = promql_p99_us / json_p99_us
answered = query("/api/v1/query", query='hotpath_ticks_answered_total{engine="0"}', time=at)
print(f"scraped count {count} (as the JSON), answered {answered[0]['value'][1]}; p99: PromQL {promql_p99_us:.3f} us, "
      f"JSON {json_p99_us:.3f} us, ratio {ratio:.3f}")
assert int(float(answered[0]["value"][1])) == count
assert 2 ** -0.25 <= ratio <= 2 ** 0.25, f"p99 from Prometheus {promql_p99_us} us vs the run's {json_p99_us} us"
info = query("/api/v1/query", query='hotpath_engine_info', time=at)
assert info and info[0]["metric"]["backend"] == "cpu", info
print("PASS")
PY
