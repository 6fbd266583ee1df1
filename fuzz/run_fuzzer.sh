#!/usr/bin/env bash
# Runs one libFuzzer target for a fixed time over a scratch copy of its seed corpus (the seeds in the
# repository are never written to). Exit status: the fuzzer's (0: no crash, leak, timeout or OOM).
#   fuzz/run_fuzzer.sh BINARY SEED_DIR SECONDS [extra libFuzzer flags]
set -euo pipefail
bin=$1 seeds=$2 seconds=$3
shift 3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/artifacts"
cp -r "$seeds"/. "$work/corpus/"
# -timeout: one input taking over 10 s is a hang; -rss_limit_mb: a huge allocation is a failure.
"$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$@" "$work/corpus" 2>"$work/log" || {
  status=$?
  tail -40 "$work/log"
  for a in "$work"/artifacts/*; do
    [ -e "$a" ] && { echo "failing input $(basename "$a"), base64:"; base64 -w0 "$a" | head -c 4000; echo; }
  done
  exit $status
}
grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb|^Done' "$work/log" || true
