#!/usr/bin/env python3
"""Every file under bench/results/ is cited by the docs (BENCHMARKS.md, README.md, docs/), by its path, a glob
(*, <run>, {a,b}) or a folder (a path ending in /), and every such citation names something there. Lists the
strays both ways and exits 1 when there are some.
  tests/repo/results_cited.py [SOURCE_DIR]   (default: this script's repository)"""
import fnmatch, os, re, sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
os.chdir(root)
docs = ["BENCHMARKS.md", "README.md"] + [os.path.join(d, f) for d, _, fs in os.walk("docs") for f in fs if f.endswith(".md")]
text = "\n".join(open(p, encoding="utf-8").read() for p in docs if os.path.exists(p))

def expand(pat):
    m = re.search(r"\{([^}]*)\}", pat)
    if not m:
        return [pat]
    return [x for alt in m.group(1).split(",") for x in expand(pat[: m.start()] + alt + pat[m.end():])]

patterns = []
for m in re.finditer(r"bench/results/((?:[^\s)`;'\"{,]|\{[^}]*\})+)", text):
    p = re.sub(r"<[^>]*>", "*", m.group(1)).rstrip(".:")
    patterns += expand(p)
files = sorted(os.path.relpath(os.path.join(d, f), "bench/results") for d, _, fs in os.walk("bench/results") for f in fs)
# A file is also cited by a name the docs give in backticks near its folder's citation: its path from any of
# its folders down (`run2-families.json` beside bench/results/2026-12-03-h200-cluster/...), one of its folders
# (`run7-both-mechanisms/`), or, at the top level, its own name.
quoted = set(re.findall(r"`([^`\s]+)`", text))
def cited(f):
    for p in patterns:
        if (p.endswith("/") and f.startswith(p)) or fnmatch.fnmatchcase(f, p):
            return True
    parts = f.split("/")
    names = {"/".join(parts[i:]) for i in range(len(parts))} if len(parts) > 1 else {f}
    names |= {"/".join(parts[i:j]) + "/" for j in range(1, len(parts)) for i in range(j)}
    if len(parts) > 1 and not re.match(r"(run|call)[0-9A-Z]", parts[-1]):
        names.discard(parts[-1])  # a bare "tests.log" names nothing; a run's own "run2-families.json" does
    # the tail of a name cited right after its head (`-run8.json` beside `2026-11-29-h200-cuda-sweep.json`)
    return any(n in quoted for n in names) or any(q.startswith("-") and parts[-1].endswith(q) for q in quoted)
missing = [f for f in files if not cited(f)]
# and every citation names something that is there
dangling = sorted({p for p in patterns if p and not any((p.endswith("/") and f.startswith(p)) or fnmatch.fnmatchcase(f, p)
                                                      for f in files)})
if missing:
    print(f"results_cited: {len(missing)} of {len(files)} file(s) under bench/results/ are cited by no doc:", file=sys.stderr)
    for f in missing:
        print("  bench/results/" + f, file=sys.stderr)
if dangling:
    print(f"results_cited: {len(dangling)} citation(s) of bench/results/ name nothing there:", file=sys.stderr)
    for p in dangling:
        print("  bench/results/" + p, file=sys.stderr)
if missing or dangling:
    sys.exit(1)
print(f"results_cited: all {len(files)} files under bench/results/ are cited")
