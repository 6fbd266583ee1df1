#!/usr/bin/env bash
# The long runs (kill test, soak) on the GPU machine, after gpu-check.sh has built the tree:
#   scripts/gpu-soak.sh [--build DIR] [--out DIR] kill|soak
#     --build DIR   the built tree (default build-gpu)     --out DIR   results (default $OUT, else gpu-out)
#   (the form recorded before the flags, scripts/gpu-soak.sh BUILD_DIR OUT_DIR kill|soak, still works)
#   kill: the host process is SIGKILLed mid-run; the GPU must be idle again within the lease, and the
#         next process must start and answer correctly.
#   soak: `hotpath bench` for SOAK_SECONDS (300) on each backend of SOAK_BACKENDS ("cuda cpu": both at
#         once, on disjoint cores: the machine's halves, from nproc (16 cores: cuda on 1-7, critical
#         thread on 2; cpu on 8-15, critical 8, precompute 9-11), each at SOAK_RATE ticks/s (1000)
#         with every answer checked against float64, an idle gap of 3 s every 30 s and a report every 60 s. Each run must then show 0
#         errors over the bound, 0 lost ticks or checks, RSS and GPU memory flat and the last
#         interval's p99 within 10% of the first's. "Flat" is judged from the second interval on: in
#         the first, the checker's output ring allocates its second 1 MiB block (at 65,536 records of
#         lstm_s), after which blocks are recycled; RSS may then grow by at most 0.25 MiB and GPU memory
#         by at most 2 MiB.
set -u -o pipefail
SCRIPT=gpu-soak.sh
. "$(dirname "$0")/lib/flags.sh"
BUILD=build-gpu
OUT=${OUT:-gpu-out}
FLAGS=(--build:BUILD --out:OUT)
flag_parse 16 "$@"
case ${#pos[@]} in
  1) WHAT=${pos[0]} ;;
  3) BUILD=${pos[0]}; OUT=${pos[1]}; WHAT=${pos[2]} ;;
  *) flag_die "say what to run: kill or soak (--help)" ;;
esac
[ "$WHAT" = kill ] || [ "$WHAT" = soak ] || flag_die "runs kill or soak, not '$WHAT'"
HP="$BUILD/hotpath"
mkdir -p "$OUT"
now() { date +%s.%N; }
gpu_util() { nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits | head -1; }
gpu_mem() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
. "$(dirname "$0")/lib/gpu-guard.sh"

kill_test() {
  echo "== kill test: idle GPU before: util $(gpu_util)% mem $(gpu_mem) MiB"
  "$HP" bench --model lstm_s --backend cuda --seconds 60 --no-pingpong --cpuset 2 >"$OUT/kill-victim.log" 2>&1 &
  local pid=$!
  sleep 10
  echo "   serving (pid $pid): util $(gpu_util)% mem $(gpu_mem) MiB; compute apps: $(gpu_others)"
  kill -0 "$pid" 2>/dev/null || { echo "   FAIL: the victim exited before the kill"; tail -5 "$OUT/kill-victim.log"; return 1; }
  local t0; t0=$(now)
  kill -9 "$pid"
  wait "$pid" 2>/dev/null
  local idle_after=""
  for _ in $(seq 1 100); do  # up to ~30 s
    u=$(gpu_util)
    if [ "$u" = 0 ] && [ -z "$(gpu_others)" ]; then idle_after=$(awk -v a="$(now)" -v b="$t0" 'BEGIN{printf "%.1f", a-b}'); break; fi
    sleep 0.3
  done
  if [ -z "$idle_after" ]; then echo "   FAIL: GPU still busy 30 s after the kill (util $(gpu_util)%)"; return 1; fi
  echo "   GPU idle (util 0%, no compute apps, mem $(gpu_mem) MiB) ${idle_after} s after SIGKILL"
  "$HP" bench --model lstm_s --backend cuda --ticks 20000 --check-every 1 --cpuset 2 >"$OUT/kill-next.log" 2>&1
  local rc=$?
  grep -E 'error|PASS|FAIL' "$OUT/kill-next.log" | tail -3
  [ $rc = 0 ] && echo "   next process: exit 0 (kill test PASS)" || { echo "   FAIL: next process exit $rc"; return 1; }
}

soak() {
  local secs=${SOAK_SECONDS:-300} rate=${SOAK_RATE:-1000}
  local common=(--model lstm_s --mode window --duration "$secs" --rate "$rate" --check-every 1
                --report-every 60 --idle-every-s 30 --idle-s 3 --seed 7)
  echo "== soak: ${secs} s on each of: ${SOAK_BACKENDS:-cuda cpu} (at once), ${rate} ticks/s, every answer checked"
  local pids=() jsons=()
  # the machine's halves, from nproc (16 cores: cuda on 1-7, cpu on 8-15)
  local h=$(( $(nproc) / 2 )) last=$(( $(nproc) - 1 ))
  [ "$h" -ge 6 ] || { echo "soak: needs 12 cores or more (two halves of 6); this machine has $(nproc)"; return 2; }
  for b in ${SOAK_BACKENDS:-cuda cpu}; do
    case $b in
      cuda) taskset -c "1-$((h - 1))" "$HP" bench "${common[@]}" --backend cuda --precision fp16 --cpuset 2 --check-threads $((h - 3)) \
              --json "$OUT/soak-cuda.json" >"$OUT/soak-cuda.log" 2>&1 & ;;
      cpu)  taskset -c "$h-$last" "$HP" bench "${common[@]}" --backend cpu --precision bf16 --cpuset "$h-$((h + 3))" --check-threads 4 \
              --json "$OUT/soak-cpu.json" >"$OUT/soak-cpu.log" 2>&1 & ;;
      *) echo "unknown soak backend $b"; return 2 ;;
    esac
    pids+=($!); jsons+=("$OUT/soak-$b.json")
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"; echo "   ${jsons[$i]##*/}: exit $?"
  done
  python3 - "${jsons[@]}" <<'PY'
import json, sys
ok_all = True
for path in sys.argv[1:]:
    try:
        r = json.load(open(path))
    except Exception as e:
        print(f"   {path}: no report ({e})"); ok_all = False; continue
    iv = r.get("intervals", [])
    e = r["error"]
    first, last = iv[0], iv[-1]
    p99 = [i["latency_us"]["p99"] for i in iv]
    rss = [i["rss_bytes"] / 2**20 for i in iv]
    gpu = [i["gpu_memory_used_bytes"] / 2**20 for i in iv if "gpu_memory_used_bytes" in i]
    checks = {
        "run passes": r.get("pass") is True,
        "0 ticks over the bound": e["ticks_over_bound"] == 0,
        "every due check made": e["lost_checks"] == 0 and e["unchecked_ticks"] == 0 and e["checked_ticks"] == e["checks_due"],
        "0 lost ticks": r.get("lost_ticks", 0) == 0 and all(i["lost_ticks"] == 0 for i in iv),
        "RSS flat (last - second interval <= 0.25 MiB)": len(rss) > 1 and rss[-1] - rss[1] <= 0.25,
        "GPU memory flat (|last - second| <= 2 MiB)": not gpu or (len(gpu) > 1 and abs(gpu[-1] - gpu[1]) <= 2.0),
        "last p99 within 10% of the first": p99[-1] <= 1.10 * p99[0],
    }
    ok = all(checks.values()); ok_all &= ok
    print(f"   {r.get('backend', path)}: {r['count']} ticks, {e['checked_ticks']} checked, max error {e['normalized']:.3g} "
          f"(bound {e['bound']}), lost {r.get('lost_ticks', 0)}, idle gaps {r.get('idle_gaps', r.get('pacing', {}).get('idle_gaps', '?'))}")
    print("      p99 per interval (us): " + " ".join(f"{x:.2f}" for x in p99))
    print("      RSS per interval (MiB): " + " ".join(f"{x:.2f}" for x in rss))
    if gpu: print("      GPU memory per interval (MiB): " + " ".join(f"{x:.0f}" for x in gpu))
    for k, v in checks.items(): print(f"      {'ok  ' if v else 'FAIL'} {k}")
print("   soak " + ("PASS" if ok_all else "FAIL"))
sys.exit(0 if ok_all else 1)
PY
}

case "$WHAT" in
  kill) kill_test ;;
  soak) soak ;;
  *) flag_die "runs kill or soak, not '$WHAT'" ;;
esac
