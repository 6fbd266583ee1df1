#!/usr/bin/env bash
# Issue 13's long runs on the GPU machine, after gpu-check.sh has built BUILD_DIR:
#   scripts/gpu-soak.sh BUILD_DIR OUT_DIR kill|soak
#   kill: the host process is SIGKILLed mid-run; the GPU must be idle again within the lease, and the
#         next process must start and answer correctly.
#   soak: see the soak section below (SOAK_SECONDS per backend, 300 by default).
set -u -o pipefail
BUILD=$1
OUT=$2
WHAT=$3
HP="$BUILD/hotpath"
mkdir -p "$OUT"
now() { date +%s.%N; }
gpu_util() { nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits | head -1; }
gpu_mem() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }

kill_test() {
  echo "== kill test: idle GPU before: util $(gpu_util)% mem $(gpu_mem) MiB"
  "$HP" bench --model lstm_s --backend cuda --seconds 60 --no-pingpong --cpuset 2 >"$OUT/kill-victim.log" 2>&1 &
  local pid=$!
  sleep 10
  echo "   serving (pid $pid): util $(gpu_util)% mem $(gpu_mem) MiB; compute apps: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | tr '\n' ' ')"
  kill -0 "$pid" 2>/dev/null || { echo "   FAIL: the victim exited before the kill"; tail -5 "$OUT/kill-victim.log"; return 1; }
  local t0; t0=$(now)
  kill -9 "$pid"
  wait "$pid" 2>/dev/null
  local idle_after=""
  for _ in $(seq 1 100); do  # up to ~30 s
    u=$(gpu_util); m=$(gpu_mem); apps=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)
    if [ "$u" = 0 ] && [ "$apps" = 0 ]; then idle_after=$(awk -v a="$(now)" -v b="$t0" 'BEGIN{printf "%.1f", a-b}'); break; fi
    sleep 0.3
  done
  if [ -z "$idle_after" ]; then echo "   FAIL: GPU still busy 30 s after the kill (util $(gpu_util)%)"; return 1; fi
  echo "   GPU idle (util 0%, no compute apps, mem $(gpu_mem) MiB) ${idle_after} s after SIGKILL"
  "$HP" bench --model lstm_s --backend cuda --ticks 20000 --check-every 1 --cpuset 2 >"$OUT/kill-next.log" 2>&1
  local rc=$?
  grep -E 'error|PASS|FAIL' "$OUT/kill-next.log" | tail -3
  [ $rc = 0 ] && echo "   next process: exit 0 (kill test PASS)" || { echo "   FAIL: next process exit $rc"; return 1; }
}

case "$WHAT" in
  kill) kill_test ;;
  *) echo "usage: gpu-soak.sh BUILD_DIR OUT_DIR kill|soak"; exit 2 ;;
esac
