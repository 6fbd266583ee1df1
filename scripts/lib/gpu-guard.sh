# shellcheck shell=bash
# Sourced by the GPU scripts: deadlines that leave nothing behind, and a check that the GPU is ours.
#
# A deadline must end the whole process tree: compute-sanitizer runs its target as a child, and killing
# the tool alone left the target (a persistent kernel) on the GPU, where it time-sliced every later
# benchmark (2026-12-03: p99.9 ~2.5 ms in every run after a killed racecheck).

# bounded SECONDS CMD...: runs CMD in its own process group; past SECONDS, kills the group. Returns
# CMD's status (137 when killed).
bounded() {
  local seconds=$1; shift
  setsid "$@" &
  local pid=$!
  # the watcher is a group of its own too, so ending it early ends its sleep as well
  setsid bash -c 'sleep "$1"; kill -9 -- "-$2" 2>/dev/null' bounded "$seconds" "$pid" &
  local watcher=$!
  wait "$pid"; local rc=$?
  kill -- "-$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null
  kill -9 -- "-$pid" 2>/dev/null   # anything the command left running in its group
  return $rc
}

# gpu_others: prints the pids of processes that hold a context on the GPU (none while our benchmarks
# should start: another process's persistent kernel time-slices with ours, and its latencies are void).
gpu_others() {
  command -v nvidia-smi >/dev/null || return 0
  nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr '\n' ' ' | sed 's/ *$//'
}
