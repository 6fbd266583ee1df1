#!/usr/bin/env bash
# scripts/gpu-check.sh takes its parts as flags (--skip, --with, --only) and reads the environment toggles of
# the commands recorded before them in one place: --plan prints what a call would run, and stops before
# anything is built, so this runs anywhere. A wrong flag, part or value is refused by name with exit 2.
set -u
S="$1/scripts/gpu-check.sh"
fail=0
check() {  # check NAME WANT GOT
  if [ "$2" != "$3" ]; then echo "FAIL $1: want [$2] got [$3]"; fail=1; else echo "ok   $1"; fi
}
parts() { "$S" --plan "$@" 2>&1 | grep -v '^quick=' | tr '\n' ' ' | sed 's/ $//'; }
check default "gpu-tests capi-tests py-tests engine-tests capi-bench parallel-tests sanitizer cpu-tests sweep families bench kill-test" "$(parts)"
check skip+with "gpu-tests sanitizer probe" "$(parts --only gpu-tests,sanitizer --with probe)"
check bench-ticks-0 "sweep" "$(parts --only sweep,bench --bench-ticks 0)"
check recorded-env "gpu-tests probe" "$(GPU_TESTS=1 PROBE=1 CAPI_TESTS=0 PY_TESTS=0 ENGINE_TESTS=0 CAPI_BENCH=0 PARALLEL_TESTS=0 \
  SANITIZER=0 CPU_TESTS=0 SWEEP=0 FAMILIES=0 BENCH_TICKS=0 KILL_TEST=0 parts)"
check quick "quick=1 bench_ticks=5 build=/b out=/o" "$("$S" --plan --quick --bench-ticks 5 --build /b --out /o | tail -1)"
refused() {  # refused NAME TEXT ARGS...: exit 2 and TEXT on stderr
  local name=$1 text=$2; shift 2
  local err rc
  err=$("$S" "$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 2 ] || [[ "$err" != *"$text"* ]]; then echo "FAIL $name: rc $rc, [$err]"; fail=1; else echo "ok   $name"; fi
}
refused unknown-part "unknown part 'nope'" --plan --skip nope
refused unknown-flag "unknown argument '--frob'" --frob
refused bad-number "--bench-ticks takes a whole number, not 'x'" --bench-ticks x
refused missing-value "--skip needs a value" --skip
SWEEP=2 refused bad-env "SWEEP=2: 0 or 1" --plan
exit $fail
