#!/usr/bin/env python3
"""Instructions the cpu backend's critical step executes a tick, counted under qemu-user (docs/portability.md).

Runs `hotpath bench --backend cpu --mode streaming` under qemu with one instruction a translation block
(-singlestep) and execution logging (-d exec,nochain) filtered to the address ranges of the chosen kernel
table's critical-step functions (crit_*, head*: the answer's path; the precompute is not counted), twice
with different tick counts, and divides the difference of the two counts by the difference of the ticks
(so start-up, warm-up and the checker cancel). The same for an aarch64 build (qemu-aarch64) and an x86-64
one (qemu-x86_64 -cpu max, which has AVX2 but not AVX-512). Prints one JSON object a case.

  bench/count_instructions.py --binary build-aarch64/hotpath --model lstm_s --precision fp32 --cpu-options isa=neon
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

NAMESPACES = {"neon": ("neon", "neon_ext"), "sve": ("sve256", "sve512"), "avx2": ("avx2",), "avx512": ("avx512",), "generic": ("generic",)}


def elf_machine(path):
    with open(path, "rb") as f:
        head = f.read(20)
    if head[:4] != b"\x7fELF":
        sys.exit(f"count_instructions: {path} is not an ELF file")
    return int.from_bytes(head[18:20], "little")  # 62 x86-64, 183 aarch64


def symbols(binary, nm, table_ns):
    """(start, end) of every critical-step function of the table's namespace(s)."""
    out = subprocess.run([nm, "-C", "--defined-only", "-S", binary], check=True, capture_output=True, text=True).stdout
    ranges = []
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) < 4 or parts[2].lower() not in ("t", "w"):
            continue
        name = parts[3]
        for ns in table_ns:
            if re.match(rf"void hotpath::cpu::{ns}::(crit_\w+|head(_i8)?)<", name):
                start, size = int(parts[0], 16), int(parts[1], 16)
                ranges.append((start, start + size, name))
    if not ranges:
        sys.exit(f"count_instructions: no critical-step functions of {'/'.join(table_ns)} in {binary}")
    return ranges


def load_base(qemu, sysroot, binary):
    """Where qemu-user maps the (position-independent) binary: the first mapping of its page log."""
    r = subprocess.run([qemu, *sysroot, "-d", "page", binary, "--help"], capture_output=True, text=True)
    m = re.search(r"^([0-9a-f]{16})-[0-9a-f]{16} ", r.stderr, re.M)
    if not m:
        sys.exit(f"count_instructions: no page layout from {qemu} -d page: {r.stderr[:400]}")
    return int(m.group(1), 16)


def count(qemu, sysroot, env, binary, ranges, base, args, ticks, workdir):
    log = os.path.join(workdir, f"exec-{ticks}.log")
    dfilter = ",".join(f"0x{base + lo:x}..0x{base + hi - 1:x}" for lo, hi, _ in ranges)
    cmd = [qemu, *sysroot, "-singlestep", "-d", "exec,nochain", "-dfilter", dfilter, "-D", log, binary, "bench",
           "--backend", "cpu", "--mode", "streaming", "--model", args.model, "--precision", args.precision,
           "--cpu-options", args.cpu_options, "--ticks", str(ticks), "--warmup", "10", "--check-every", "1000000000",
           "--no-progress", "--json", os.path.join(workdir, f"bench-{ticks}.json")]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    # Exit 1 is bench's verdict on the error (int8 with 8-bit activations can exceed the bound): the run
    # itself completed and is counted.
    if r.returncode not in (0, 1) or not os.path.exists(os.path.join(workdir, f"bench-{ticks}.json")):
        sys.exit(f"count_instructions: {' '.join(cmd)} exited {r.returncode}: {r.stderr[-800:]}")
    n = 0
    with open(log, "rb") as f:
        for line in f:
            n += line.startswith(b"Trace ")
    os.remove(log)
    with open(os.path.join(workdir, f"bench-{ticks}.json")) as f:
        variant = json.load(f).get("variant") or ""
    return n, variant


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", required=True, help="the hotpath command (x86-64 or aarch64 ELF)")
    p.add_argument("--model", default="lstm_s")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--cpu-options", default="isa=auto", help="e.g. isa=neon,bf16=dot")
    p.add_argument("--qemu-cpu", default="max", help="qemu's CPU model (max: every extension it emulates)")
    p.add_argument("--ticks", type=int, nargs=2, default=[20, 120], metavar=("FEW", "MORE"))
    a = p.parse_args()
    machine = elf_machine(a.binary)
    if machine == 183:
        qemu, nm, sysroot = "qemu-aarch64", "aarch64-linux-gnu-nm", ["-L", "/usr/aarch64-linux-gnu"]
    elif machine == 62:
        qemu, nm, sysroot = "qemu-x86_64", "nm", []
    else:
        sys.exit(f"count_instructions: ELF machine {machine} is neither x86-64 nor aarch64")
    isa = re.search(r"isa=(\w+)", a.cpu_options)
    table_ns = NAMESPACES.get(isa.group(1) if isa else "", None)
    if table_ns is None:
        sys.exit("count_instructions: --cpu-options must name isa=neon, sve, avx2, avx512 or generic")
    ranges = symbols(a.binary, nm, table_ns)
    base = load_base(qemu, sysroot, a.binary)
    env = dict(os.environ, QEMU_CPU=a.qemu_cpu)
    few, more = a.ticks
    with tempfile.TemporaryDirectory() as d:
        n_few, variant = count(qemu, sysroot, env, a.binary, ranges, base, a, few, d)
        n_more, _ = count(qemu, sysroot, env, a.binary, ranges, base, a, more, d)
    print(json.dumps({"model": a.model, "precision": a.precision, "cpu_options": a.cpu_options, "variant": variant,
                      "arch": "aarch64" if machine == 183 else "x86_64", "qemu_cpu": a.qemu_cpu,
                      "ticks": [few, more], "instructions": [n_few, n_more],
                      "instructions_per_tick": (n_more - n_few) / (more - few)}))


if __name__ == "__main__":
    main()
