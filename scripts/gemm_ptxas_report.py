#!/usr/bin/env python3
"""Resource and SASS checks of the grouped GEMM kernels.

  python3 scripts/gemm_ptxas_report.py BUILD_LOG
      ptxas -v report, one line per sm90_grouped_gemm instantiation: kind, tile, stages, split,
      epilogue, gather, registers, stack frame, spill stores/loads. Exits 1 if any GEMM kernel
      spills or has a stack frame. Build with -DDIST_MOE_PTXAS_VERBOSE=ON and make sure the GEMM
      objects recompile, or ptxas prints nothing.
  cuobjdump -sass libdist_moe_gemm.a | python3 scripts/gemm_ptxas_report.py --sass
      HGMMA instructions per GEMM kernel. Exits 1 if a GEMM kernel has none (a slow fallback path).
"""
import re
import sys

KINDS = {"0": "fprop", "1": "dgrad", "2": "wgrad", "3": "fprop_swapab"}


def describe(mangled):
    """'dgrad 128x128 s6 pp StoreEpilogue<fp32> tma' from a mangled sm90_grouped_gemm instantiation."""
    m = re.search(r"GemmKindE(\d)ELi(\d+)ELi(\d+)ELi(\d+)ELb(\d)ELb(\d)ELi(\d)EEENS0_(\d+)(\w+?)I", mangled)
    if not m:
        return None
    kind, bm, bn, stages, split, pingpong, cluster, _, epi = m.groups()
    out = "fp32" if "StoreEpilogueIS5_fN" in mangled else "bf16"
    gather = mangled.endswith("Lb1EEEEEvNT_6ParamsE")  # kGather, the kernel's last template argument
    tma = "SwizzledTmaWriter" in mangled
    name = (f"{KINDS[kind]:<12} {bm}x{bn} s{stages} {'c' + cluster + ' ' if cluster != '1' else ''}"
            f"{'pp ' if pingpong == '1' else ''}{'split ' if split == '1' else ''}{epi}")
    if epi in ("StoreEpilogue",):
        name += f"<{out}>"
    return name + (" tma" if tma else "") + (" gather" if gather else "")


def sass_main():
    counts, order, current = {}, [], None
    for line in sys.stdin:
        m = re.search(r"Function : (\S+)", line)
        if m:
            current = m.group(1)
            if describe(current) and current not in counts:
                counts[current] = 0
                order.append(current)
            continue
        if current in counts and "HGMMA" in line:
            counts[current] += 1
    print(f"{'kernel':<58} {'HGMMA':>6}")
    missing = 0
    for f in order:
        print(f"{describe(f):<58} {counts[f]:>6}")
        missing += counts[f] == 0
    print(f"{len(order)} GEMM kernels, {'all issue HGMMA' if not missing else str(missing) + ' WITHOUT HGMMA'}")
    return 1 if missing or not order else 0


def main():
    if sys.argv[1:2] == ["--sass"]:
        return sass_main()
    text = open(sys.argv[1], errors="replace").read().splitlines()
    rows, current, bad = [], None, 0
    for i, line in enumerate(text):
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            current = m.group(1)
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            stack, st, ld = map(int, m.groups())
            regs = 0
            for nxt in text[i + 1:i + 3]:
                r = re.search(r"Used (\d+) registers", nxt)
                if r:
                    regs = int(r.group(1))
            d = describe(current)
            if d:
                rows.append((d, regs, stack, st, ld))
                bad += stack > 0 or st > 0 or ld > 0
            current = None
    seen = set()
    print(f"{'kernel':<58} {'regs':>4} {'stack':>5} {'spill st/ld':>11}")
    for d, regs, stack, st, ld in rows:
        if d in seen:
            continue
        seen.add(d)
        print(f"{d:<58} {regs:>4} {stack:>5} {st:>5}/{ld:<5}")
    print(f"{len(seen)} GEMM kernels, {'none spill' if not bad else str(bad) + ' with stack/spills'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
