#!/usr/bin/env bash
# The benchmark scripts (gpu-bench, gpu-soak, throughput-bench, cpu-bench, hybrid-bench) take their arguments as flags
# (scripts/lib/flags.sh): --help prints their usage and exits 0; an unknown flag, a flag without its value
# and a count that is not a whole number are refused by name with exit 2, before anything runs, so this
# runs anywhere.
set -u
D="$1/scripts"
fail=0
refused() {  # refused NAME SCRIPT TEXT ARGS...
  local name=$1 script=$2 text=$3; shift 3
  local err rc
  err=$("$D/$script" "$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 2 ] || [[ "$err" != *"$text"* ]]; then echo "FAIL $name: rc $rc, [$err]"; fail=1; else echo "ok   $name"; fi
}
for s in gpu-bench.sh gpu-soak.sh throughput-bench.sh cpu-bench.sh hybrid-bench.sh; do
  out=$("$D/$s" --help 2>&1); rc=$?
  if [ $rc -ne 0 ] || [[ "$out" != *"--build DIR"* ]]; then echo "FAIL $s --help: rc $rc"; fail=1; else echo "ok   $s --help"; fi
  refused "$s unknown" "$s" "$s: unknown argument '--frob'" --frob
  refused "$s missing" "$s" "$s: --out needs a value" --out
done
refused "gpu-bench ticks" gpu-bench.sh "--ticks takes a whole number, not 'many'" --ticks many
refused "cpu-bench ticks" cpu-bench.sh "--ticks takes a whole number, not '1e5'" --ticks 1e5
refused "hybrid-bench ticks" hybrid-bench.sh "--ticks takes a whole number, not '2k'" --ticks 2k
refused "hybrid-bench positional" hybrid-bench.sh "unknown argument 'lstm_m'" lstm_m
refused "gpu-soak what" gpu-soak.sh "runs kill or soak, not 'nap'" --build /nonexistent nap
refused "gpu-soak nothing" gpu-soak.sh "say what to run" --build /nonexistent
exit $fail
