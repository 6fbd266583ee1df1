#!/usr/bin/env bash
# The host code is portable (docs/portability.md): what only one CPU architecture understands lives in
# src/util/arch.hpp (spin hint, mailbox stores and fences, cycle counter, ISA detection) and in the CPU
# backend's per-ISA kernel files, each built only for its own architecture. Lists every other use
# (file:line:text) of x86 intrinsics or builtins, Arm intrinsics or HWCAP probes, inline assembly in host
# code, or x86 -m flags in CMake, and exits 1 when there is one.
#   tests/repo/arch_constructs.sh [SOURCE_DIR]   (default: this script's repository)
#   tests/repo/arch_constructs.sh --refuses      (plants each kind of construct in a scratch tree: each is named)
set -euo pipefail

x86='<(imm|emm|xmm|pmm|smm|tmm|nmm|wmm|avx|x86)intrin\.h>|\b_mm(256|512)?_[a-z]|\b__rdtscp?\b|__builtin_ia32_|__builtin_cpu_(supports|init)'
arm='<arm_(neon|sve|acle)\.h>|\bv(ld|st)[1-4]q?_|\bvdupq?_n_|\bsv(ld1|st1|dup|ptrue)_?|\bgetauxval\b|\bHWCAP2?_|\bPR_SVE_'
asm='\b(asm|__asm__)[[:space:]]*(volatile|__volatile__)?[[:space:]]*\('
mflags='-m(avx|amx|sse|fma|bmi|arch=)'

check() {
  local root="$1" hits=""
  cd "$root"
  local files
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    files=$(git ls-files --cached --others --exclude-standard -- src bench tests python fuzz include examples 2>/dev/null || true)
  else
    files=$(find src bench tests python fuzz include examples -type f 2>/dev/null || true)
  fi
  # Host C and C++ only: CUDA sources (.cu, .cuh and the device headers under src/cuda/kernels) are PTX's.
  local host
  host=$(printf '%s\n' "$files" | grep -E '\.(c|cc|cpp|h|hpp)$' | grep -vE '^src/cuda/kernels/|^bench/results/' || true)
  [ -z "$host" ] && return 0
  local f
  hits+=$(printf '%s\n' "$host" | grep -vE '^src/util/arch\.hpp$|^src/cpu/kernels_(avx2|avx512|amx)\.cpp$' |
          xargs -r grep -nHE -- "$x86" 2>/dev/null | sed 's/$/   [x86-only]/' || true)
  hits+=$(printf '%s\n' "$host" | grep -vE '^src/util/arch\.hpp$|^src/cpu/kernels_(neon(_ext|_traits)?|sve(256|512|_traits))\.(cpp|hpp)$' |
          xargs -r grep -nHE -- "$arm" 2>/dev/null | sed 's/$/   [Arm-only]/' || true)
  hits+=$(printf '%s\n' "$host" | grep -vE '^src/util/arch\.hpp$' |
          xargs -r grep -nHE -- "$asm" 2>/dev/null | sed 's/$/   [inline assembly]/' || true)
  # x86 -m flags only in the x86 branch of the CPU backend's CMakeLists (and -march for Arm's extension unit there).
  hits+=$(printf '%s\n' "$files" | grep -E '(^|/)CMakeLists\.txt$|\.cmake$' | grep -vE '^src/cpu/CMakeLists\.txt$' |
          xargs -r grep -nHE -- "$mflags" 2>/dev/null | sed 's/$/   [architecture flag]/' || true)
  if [ -n "$hits" ]; then
    echo "arch_constructs: architecture-specific code outside src/util/arch.hpp and the per-ISA kernel files:" >&2
    printf '%s\n' "$hits" >&2
    return 1
  fi
}

if [ "${1:-}" = "--refuses" ]; then
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  mkdir -p "$scratch/src/util" "$scratch/src/cpu"
  printf '#include <immintrin.h>\nvoid f() { _mm_pause(); }\n' >"$scratch/src/util/spin.cpp"
  printf '#include <arm_neon.h>\n' >"$scratch/src/cpu/other.hpp"
  printf 'void g() { asm volatile("nop"); }\n' >"$scratch/src/cpu/nop.cpp"
  printf 'target_compile_options(x PRIVATE -mavx2)\n' >"$scratch/src/util/CMakeLists.txt"
  printf '#include <immintrin.h>\n' >"$scratch/src/util/arch.hpp"  # allowed there
  set +e
  out=$( (check "$scratch") 2>&1); rc=$?
  set -e
  for want in "src/util/spin.cpp:1:.*x86-only" "src/util/spin.cpp:2:.*x86-only" "src/cpu/other.hpp:1:.*Arm-only" \
              "src/cpu/nop.cpp:1:.*inline assembly" "src/util/CMakeLists.txt:1:.*architecture flag"; do
    printf '%s\n' "$out" | grep -qE "$want" || { echo "arch_constructs --refuses: not reported: $want"; echo "$out"; exit 1; }
  done
  if printf '%s\n' "$out" | grep -q "^src/util/arch.hpp:"; then echo "arch_constructs --refuses: arch.hpp reported"; exit 1; fi
  [ "$rc" = 1 ] || { echo "arch_constructs --refuses: exit $rc, expected 1"; exit 1; }
  echo "arch_constructs --refuses: every planted construct named, exit 1"
  exit 0
fi
check "${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
