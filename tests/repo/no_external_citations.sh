#!/usr/bin/env bash
# Code, tests, scripts and docs cite the repository's own docs (docs/*.md, README.md), never a document that is
# not in the repository ("SPEC §4", "SPEC.md") nor an issue number ("issue 10", "(issue 12)"): a reader
# of a clone has neither. Lists every hit (file:line:text) and exits 1 when there is one.
#   tests/repo/no_external_citations.sh [SOURCE_DIR]   (default: this script's repository)
set -euo pipefail
root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
cd "$root"
# Where citations are refused; bench/results (recorded runs) is left as it was recorded.
paths=(src python tests scripts examples fuzz include cmake bench docs README.md BENCHMARKS.md CMakeLists.txt CMakePresets.json
       pyproject.toml)
self="tests/repo/no_external_citations.sh"
pattern='SPEC( ?§|\.md|'\''s|\))|\(SPEC\b|\b[Ii]ssue [0-9]|\b[Ii]ssues? #[0-9]'

existing=()
for p in "${paths[@]}"; do [ -e "$p" ] && existing+=("$p"); done
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # Tracked files and new ones not ignored (build folders and caches are not looked at).
  hits=$(git ls-files -z --cached --others --exclude-standard -- "${existing[@]}" |
         grep -zv -e '^bench/results/' -e "^$self\$" |
         xargs -0 -r grep -nIE -- "$pattern" 2>/dev/null || true)
else
  hits=$(grep -rnIE --exclude-dir=results --exclude-dir=__pycache__ --exclude-dir=build --exclude-dir=.venv \
         -- "$pattern" "${existing[@]}" | grep -v "^$self:" || true)
fi
if [ -n "$hits" ]; then
  n=$(printf '%s\n' "$hits" | wc -l)
  echo "no_external_citations: $n line(s) cite SPEC or an issue number; cite the repository's docs/ instead:" >&2
  printf '%s\n' "$hits" >&2
  exit 1
fi
echo "no_external_citations: none in ${existing[*]}"
