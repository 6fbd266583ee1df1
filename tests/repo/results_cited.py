#!/usr/bin/env python3
"""Every file under bench/results/ is cited by the docs (BENCHMARKS.md, README.md, docs/), by its path, a glob
(*, <run>, {a,b}) or a folder (a path ending in /), and every such citation names something there; and
bench/results/INDEX.md lists every entry (scripts/results-index.py writes it). Lists the strays and exits 1
when there are some.
  tests/repo/results_cited.py [SOURCE_DIR]   (default: this script's repository)"""
import fnmatch
import os
import re
import sys

DOCS_DIR = "docs"


def doc_texts(root):
    """(path, text) of every doc that may cite a result."""
    paths = ["BENCHMARKS.md", "README.md"] + sorted(
        os.path.join(d, f) for d, _, fs in os.walk(os.path.join(root, DOCS_DIR)) for f in fs if f.endswith(".md"))
    out = []
    for p in paths:
        full = p if os.path.isabs(p) else os.path.join(root, p)
        if os.path.exists(full):
            out.append((os.path.relpath(full, root), open(full, encoding="utf-8").read()))
    return out


def _expand(pat):
    m = re.search(r"\{([^}]*)\}", pat)
    if not m:
        return [pat]
    return [x for alt in m.group(1).split(",") for x in _expand(pat[: m.start()] + alt + pat[m.end():])]


def citations(text):
    """(offset, pattern) of every bench/results/ citation in text: <run> and * are globs, {a,b} alternatives."""
    out = []
    for m in re.finditer(r"bench/results/((?:[^\s)`;'\"{,]|\{[^}]*\})+)", text):
        p = re.sub(r"<[^>]*>", "*", m.group(1)).rstrip(".:")
        out += [(m.start(), x) for x in _expand(p) if x]
    return out


def quoted(text):
    """(offset, name) of every name in backticks (a file named near its folder's citation)."""
    return [(m.start(), m.group(1)) for m in re.finditer(r"`([^`\s]+)`", text)]


def pattern_names(f, p):
    return (p.endswith("/") and f.startswith(p)) or fnmatch.fnmatchcase(f, p)


def quote_names(f, q):
    """A backticked name cites f when it is f's path from one of its folders down, one of its folders, at the top
    level its own name, a run's own file name (run2-families.json, not a bare tests.log), or the tail of a name
    cited right after its head (`-run8.json` beside `2026-11-29-h200-cuda-sweep.json`)."""
    parts = f.split("/")
    names = {"/".join(parts[i:]) for i in range(len(parts))} if len(parts) > 1 else {f}
    names |= {"/".join(parts[i:j]) + "/" for j in range(1, len(parts)) for i in range(j)}
    if len(parts) > 1 and not re.match(r"(run|call)[0-9A-Z]", parts[-1]):
        names.discard(parts[-1])
    return q in names or (q.startswith("-") and parts[-1].endswith(q))


def result_files(root):
    base = os.path.join(root, "bench", "results")
    return sorted(os.path.relpath(os.path.join(d, f), base) for d, _, fs in os.walk(base) for f in fs)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    docs = doc_texts(root)
    pats = [p for _, t in docs for _, p in citations(t)]
    quotes = {q for _, t in docs for _, q in quoted(t)}
    files = result_files(root)
    missing = [f for f in files if not any(pattern_names(f, p) for p in pats) and not any(quote_names(f, q) for q in quotes)]
    dangling = sorted({p for p in pats if not any(pattern_names(f, p) for f in files)})
    index_path = os.path.join(root, "bench", "results", "INDEX.md")
    index = open(index_path, encoding="utf-8").read() if os.path.exists(index_path) else ""
    entries = sorted({f.split("/")[0] for f in files} - {"INDEX.md"})
    unlisted = [e for e in entries if f"`{e}`" not in index]
    if missing:
        print(f"results_cited: {len(missing)} of {len(files)} file(s) under bench/results/ are cited by no doc:",
              file=sys.stderr)
        for f in missing:
            print("  bench/results/" + f, file=sys.stderr)
    if dangling:
        print(f"results_cited: {len(dangling)} citation(s) of bench/results/ name nothing there:", file=sys.stderr)
        for p in dangling:
            print("  bench/results/" + p, file=sys.stderr)
    if unlisted:
        print(f"results_cited: {len(unlisted)} entr(y/ies) missing from bench/results/INDEX.md "
              "(scripts/results-index.py writes it):", file=sys.stderr)
        for e in unlisted:
            print("  " + e, file=sys.stderr)
    if missing or dangling or unlisted:
        sys.exit(1)
    print(f"results_cited: all {len(files)} files under bench/results/ are cited, {len(entries)} entries indexed")


if __name__ == "__main__":
    main()
