#!/usr/bin/env python3
"""tests/repo/results_cited.py fails, naming the stray, on each kind of stray it looks for: a result no doc
cites, a citation of a result that is not there, an entry missing from INDEX.md; and passes the tree they
were made from. Runs it on small trees in a temporary folder.
  tests/repo/results_cited_refuses.py"""
import os
import subprocess
import sys
import tempfile

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results_cited.py")


def tree(root, docs, files, index_entries):
    os.makedirs(os.path.join(root, "bench", "results"), exist_ok=True)
    open(os.path.join(root, "BENCHMARKS.md"), "w").write(docs)
    for f in files:
        path = os.path.join(root, "bench", "results", f)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").write("{}\n")
    open(os.path.join(root, "bench", "results", "INDEX.md"), "w").write(
        "".join(f"| `{e}` |\n" for e in index_entries))


def run(root):
    return subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)


failures = []
good_docs = "Raw: `bench/results/2026-01-01-vm-a.json`, `bench/results/2026-01-02-vm-run/`; the index: `bench/results/INDEX.md`.\n"
good_files = ["2026-01-01-vm-a.json", "2026-01-02-vm-run/call1.json"]
good_index = ["2026-01-01-vm-a.json", "2026-01-02-vm-run"]
cases = [
    ("a good tree", good_docs, good_files, good_index, 0, "all 3 files"),
    ("an uncited file", good_docs, good_files + ["2026-01-03-vm-stray.json"], good_index + ["2026-01-03-vm-stray.json"], 1,
     "bench/results/2026-01-03-vm-stray.json"),
    ("a dangling citation", good_docs + "Also `bench/results/2026-01-04-vm-gone.json`.\n", good_files, good_index, 1,
     "bench/results/2026-01-04-vm-gone.json"),
    ("an entry not indexed", good_docs, good_files, good_index[:1], 1, "2026-01-02-vm-run"),
]
for name, docs, files, index, want_rc, want_text in cases:
    with tempfile.TemporaryDirectory() as root:
        tree(root, docs, files, index)
        r = run(root)
        out = r.stdout + r.stderr
        if r.returncode != want_rc or want_text not in out:
            failures.append(f"{name}: rc {r.returncode} (want {want_rc}), output lacks {want_text!r}:\n{out}")
if failures:
    print("\n".join(failures), file=sys.stderr)
    sys.exit(1)
print(f"results_cited_refuses: {len(cases)} cases as expected")
