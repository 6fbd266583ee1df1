#!/usr/bin/env python3
"""Writes bench/results/INDEX.md: every recorded run under bench/results/ (a dated file or folder), the machine,
how many files, the doc sections that cite it (where its command is written) and the commit that recorded it.
Run after adding results (tests/repo/results_cited.py fails while an entry is missing from the index).
  scripts/results-index.py [SOURCE_DIR]"""
import importlib.util
import os
import re
import subprocess
import sys

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
spec = importlib.util.spec_from_file_location("results_cited", os.path.join(root, "tests", "repo", "results_cited.py"))
rc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rc)

MACHINES = {"h200": "H200 machine (GPU, Xeon host)", "xeon": "H200 machine's Xeon host", "vm": "development VM",
            "epyc2": "2-core EPYC VM", "dev2core": "2-core development VM"}


def headings(text):
    return [(m.start(), m.group(2).strip()) for m in re.finditer(r"^(#{2,3}) (.*)$", text, re.M)]


def section_at(heads, offset):
    title = None
    for at, h in heads:
        if at > offset:
            break
        title = h
    return title


files = [f for f in rc.result_files(root) if f != "INDEX.md"]
entries = sorted({f.split("/")[0] for f in files})
docs = rc.doc_texts(root)
rows = []
for e in entries:
    mine = [f for f in files if f == e or f.startswith(e + "/")]
    where = []
    for path, text in docs:
        heads = headings(text)
        offsets = [o for o, p in rc.citations(text) if any(rc.pattern_names(f, p) for f in mine)]
        offsets += [o for o, q in rc.quoted(text) if any(rc.quote_names(f, q) for f in mine)]
        for o in sorted(offsets):
            s = section_at(heads, o) or "(top)"
            label = f"{path}: {s}"
            if label not in where:
                where.append(label)
    follow = ["--follow"] if os.path.isfile(os.path.join(root, "bench", "results", e)) else []  # through renames
    log = subprocess.run(["git", "-C", root, "log", *follow, "--diff-filter=A", "--format=%h %ad", "--date=short", "--",
                          "bench/results/" + e], capture_output=True, text=True).stdout.split("\n")
    added = [l for l in log if l.strip()]
    recorded = added[-1] if added else "not committed yet"
    token = e[11:].split("-")[0] if re.match(r"\d{4}-\d\d-\d\d-", e) else ""
    rows.append((e, MACHINES.get(token, token or "?"), len(mine), "; ".join(where) or "nowhere", recorded))

out = ["# bench/results: the recorded runs",
       "",
       "Every file here is a run's raw output, cited by the doc section that gives its command and what it measured",
       "(`tests/repo/results_cited.py` checks both ways). One entry a run or a session's calls: a dated file, or a",
       "dated folder of one session's device calls. Written by `scripts/results-index.py`; \"recorded in\" is the",
       "commit that added the entry (the code it measured is named in its section).",
       "",
       "| entry | machine | files | cited in | recorded in |",
       "|---|---|---|---|---|"]
for e, m, n, w, r in rows:
    out.append(f"| `{e}` | {m} | {n} | {w} | {r} |")
open(os.path.join(root, "bench", "results", "INDEX.md"), "w", encoding="utf-8").write("\n".join(out) + "\n")
print(f"bench/results/INDEX.md: {len(rows)} entries")
