#!/usr/bin/env python3
"""The wgmma loops of each kernel in a disassembly (scripts/sass_local.sh, or cuobjdump -sass on the
GPU machine), and how many instructions they issue.

  python3 scripts/sass_loops.py A.sass [B.sass] [--kernel REGEX]

A loop is a backward branch whose body issues a WARPGROUP.ARRIVE (a k loop, or a persistent tile
loop around one). Per loop: its instructions (decoded ones plus the address gaps the 11.8
disassembler leaves for opcodes it does not know -- QGMMA among them -- counted as "undecoded"), and
R2UR, uniform-datapath (U*), SHFL, FFMA and IMAD among them. With B, each kernel of A is listed with
its namesake in B: the A/B of a kernel change (perf_history G119).
"""
import collections
import re
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from gemm_ptxas_report import describe  # noqa: E402

INSN = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)")
LABEL = re.compile(r"^(\.L_x_\d+):")
BRANCH = re.compile(r"BRA `\((\.L_x_\d+)\)")        # nvdisasm: to a label
BRANCH_ADDR = re.compile(r"BRA (?:\S+ )?0x([0-9a-f]+)")  # cuobjdump -sass: to an address


def kernels(path):
    """{mangled name: [lines]} in file order."""
    out, cur = collections.OrderedDict(), None
    for line in open(path, errors="replace"):
        m = re.match(r"^(_Z\w+):$", line) or re.search(r"Function : (_Z\w+)", line)
        if m:
            cur = m.group(1)
            out[cur] = []
        elif cur:
            out[cur].append(line.rstrip("\n"))
    return out


def loops(lines, max_lines=1500):
    labels = {m.group(1): i for i, l in enumerate(lines) if (m := LABEL.match(l))}
    addrs = {int(m.group(1), 16): i for i, l in enumerate(lines) if (m := INSN.match(l))}
    found = []
    for i, line in enumerate(lines):
        m, a = BRANCH.search(line), BRANCH_ADDR.search(line)
        start = labels.get(m.group(1)) if m else addrs.get(int(a.group(1), 16)) if a else None
        if start is not None and start < i and i - start < max_lines and \
                any("WARPGROUP.ARRIVE" in l for l in lines[start:i + 1]):
            found.append((start, i))
    return found


def mix(lines):
    c, prev, undecoded = collections.Counter(), None, 0
    for line in lines:
        m = INSN.match(line)
        if not m:
            continue
        addr = int(m.group(1), 16)
        if prev is not None and addr - prev > 16:
            undecoded += (addr - prev) // 16 - 1
        prev = addr
        c[m.group(2)] += 1
    total = sum(c.values()) + undecoded
    uniform = sum(v for k, v in c.items() if k.startswith("U"))
    return (f"{total:5d} instr ({undecoded:3d} undecoded)  R2UR {c['R2UR']:3d}  U* {uniform:3d}  "
            f"SHFL {c['SHFL']:2d}  FFMA {c['FFMA']:3d}  IMAD {c['IMAD']:3d}")


def main():
    args = sys.argv[1:]
    pattern = None
    if "--kernel" in args:
        i = args.index("--kernel")
        pattern = re.compile(args[i + 1])
        del args[i:i + 2]
    if not 1 <= len(args) <= 2:
        print(__doc__)
        return 2
    sides = [kernels(p) for p in args]
    tags = ["A", "B"] if len(args) == 2 else [""]
    for name, lines in sides[0].items():
        if pattern and not pattern.search(name):
            continue
        print(f"== {describe(name) or name[:100]}")
        for tag, side in zip(tags, sides):
            body = side.get(name)
            if body is None:
                print(f"  {tag} (not in this file)")
                continue
            for start, end in loops(body):
                print(f"  {tag} loop lines {start}-{end}: {mix(body[start:end + 1])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
