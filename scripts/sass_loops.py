#!/usr/bin/env python3
"""The wgmma loops of each kernel in a disassembly (scripts/sass_local.sh, or cuobjdump -sass on the
GPU machine), and how many instructions they issue.

  python3 scripts/sass_loops.py A.sass [B.sass] [--kernel REGEX] [--any]

A loop is a backward branch whose body issues a WARPGROUP.ARRIVE (a k loop, or a persistent tile
loop around one); with --any, every backward branch of up to 8000 lines (the quantizers' tile loops,
with their inner loops). Per loop: its instructions (decoded ones plus the address gaps the 11.8
disassembler leaves for opcodes it does not know -- QGMMA among them -- counted as "undecoded"), and
R2UR, uniform-datapath (U*), SHFL, FFMA and IMAD among them; with --any also the shared loads, the
global stores and the barriers. With B, each kernel of A is listed with its namesake in B: the A/B of
a kernel change (perf_history G119, G162). A loop's count is its static size: branches inside it
(bounds, rare re-rounding paths) are counted whether they run or not, and with --any a backward branch
from code the compiler placed after its target (an outlined slow path jumping back) shows as a loop too.
Kernels in an anonymous namespace find their namesakes across two builds of the same file.
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
ENCODING = re.compile(r"/\* (0x[0-9a-f]{16}) \*/")      # nvdisasm -hex: an instruction's 64-bit halves


def branch_target(addr, word0, word1):
    """A BRA's target address from its encoding: offset / 4 is bits 16-23 of the first word (low 8 bits)
    over bits 34-63 of the first and 0-17 of the second (sign-extended), relative to the next instruction
    (checked on every labelled branch of four of the repository's files -- the weight, NVFP4 and fused dxy
    quantizers, the W13 GEMMs: 6148 of 6148)."""
    high = (word0 >> 34) | ((word1 & 0x3FFFF) << 30)
    if high & (1 << 47):
        high -= 1 << 48
    return addr + 16 + 4 * (((word0 >> 16) & 0xFF) | (high << 8))


def anonymous_key(name):
    """A mangled name without its anonymous namespace's two hashes, which differ between two builds of
    a changed file (how A's kernel finds its namesake in B)."""
    return re.sub(r"(_GLOBAL__N__)[0-9a-f]{8}(_\d+_\w+?_cu_)[0-9a-f]{8}", r"\1\2", name)


def kernels(path):
    """{mangled name: [lines]} in file order. nvdisasm -hex prints an instruction's second 64-bit half on a
    line of its own: it joins the instruction's line, so a kernel has as many lines with -hex as without
    (loops() bounds a loop by its lines)."""
    out, cur = collections.OrderedDict(), None
    for line in open(path, errors="replace"):
        m = re.match(r"^(_Z\w+):$", line) or re.search(r"Function : (_Z\w+)", line)
        if m:
            cur = m.group(1)
            out[cur] = []
        elif cur and out[cur] and ENCODING.fullmatch(line.strip()):
            out[cur][-1] += " " + line.strip()
        elif cur:
            out[cur].append(line.rstrip("\n"))
    return out


def undecoded_head(lines, i, addrs):
    """Branch line i names a label nvdisasm never printed: its target is an instruction the 11.8
    disassembler does not decode. With -hex encodings (both halves on the line: kernels()), (the line of
    the first decoded instruction after the target, the target's address); else None."""
    m = INSN.match(lines[i])
    words = ENCODING.findall(lines[i])
    if not m or len(words) != 2:
        return None
    head = branch_target(int(m.group(1), 16), int(words[0], 16), int(words[1], 16))
    after = [a for a in addrs if a > head]
    return (addrs[min(after)], head) if after else None


def loops(lines, max_lines=1500, marker="WARPGROUP.ARRIVE"):
    """(first line, branch line, head address) of each backward branch shorter than max_lines whose body
    holds `marker` (None: any body). The head address is None but where the loop's first instruction
    is undecoded (undecoded_head): then the first line is the decoded one after it."""
    labels = {m.group(1): i for i, l in enumerate(lines) if (m := LABEL.match(l))}
    addrs = {int(m.group(1), 16): i for i, l in enumerate(lines) if (m := INSN.match(l))}
    found = []
    for i, line in enumerate(lines):
        m, a = BRANCH.search(line), BRANCH_ADDR.search(line)
        start = labels.get(m.group(1)) if m else addrs.get(int(a.group(1), 16)) if a else None
        head = None
        if m and start is None and (resolved := undecoded_head(lines, i, addrs)):
            start, head = resolved
        if start is not None and start < i and i - start < max_lines and \
                (marker is None or any(marker in l for l in lines[start:i + 1])):
            found.append((start, i, head))
    return found


def mix(lines, memory=False, head=None):
    """The instruction mix of `lines`; head: the address of an undecoded instruction just before them,
    counted as the first."""
    c, prev, undecoded = collections.Counter(), None if head is None else head - 16, 0
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
    text = (f"{total:5d} instr ({undecoded:3d} undecoded)  R2UR {c['R2UR']:3d}  U* {uniform:3d}  "
            f"SHFL {c['SHFL']:2d}  FFMA {c['FFMA']:3d}  IMAD {c['IMAD']:3d}")
    if memory:
        text += f"  LDS {c['LDS']:3d}  STG {c['STG']:3d}  BAR {c['BAR']:2d}"
    return text


def main():
    args = sys.argv[1:]
    pattern = None
    any_loop = "--any" in args
    if any_loop:
        args.remove("--any")
    if "--kernel" in args:
        i = args.index("--kernel")
        pattern = re.compile(args[i + 1])
        del args[i:i + 2]
    if not 1 <= len(args) <= 2:
        print(__doc__)
        return 2
    sides = [kernels(p) for p in args]
    keyed = [{anonymous_key(k): v for k, v in side.items()} for side in sides]
    tags = ["A", "B"] if len(args) == 2 else [""]
    for name, lines in sides[0].items():
        if pattern and not pattern.search(name):
            continue
        print(f"== {describe(name) or name[:100]}")
        for tag, side in zip(tags, keyed):
            body = side.get(anonymous_key(name))
            if body is None:
                print(f"  {tag} (not in this file)")
                continue
            found = loops(body, 8000, None) if any_loop else loops(body)
            for start, end, head in found:
                print(f"  {tag} loop lines {start}-{end}: {mix(body[start:end + 1], any_loop, head)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
