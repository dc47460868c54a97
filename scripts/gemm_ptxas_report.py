#!/usr/bin/env python3
"""Resource and SASS checks of the grouped GEMM kernels.

  python3 scripts/gemm_ptxas_report.py BUILD_LOG
      ptxas -v report, one line per sm90_grouped_gemm instantiation: mainloop (bf16, fp8bw, mxfp8,
      nvfp4, blockscaled), kind, tile, stages, cluster, schedule, split, epilogue, gather, registers,
      stack frame, spill stores/loads. Exits 1 if a GEMM kernel spills or has a stack frame, other
      than the known ones (KNOWN_SPILLS), or if it recognizes no GEMM kernel at all (a log without
      ptxas -v, or a mangling this parser no longer reads). Build with -DDIST_MOE_PTXAS_VERBOSE=ON and
      make sure the GEMM objects recompile, or ptxas prints nothing.
  cuobjdump -sass libdist_moe_gemm.a | python3 scripts/gemm_ptxas_report.py --sass
      wgmma instructions (HGMMA, QGMMA) per GEMM kernel. Exits 1 if a GEMM kernel has none (a slow
      fallback path).
"""
import re
import sys

KINDS = {"0": "fprop", "1": "dgrad", "2": "wgrad", "3": "fprop_swapab"}
# Mainloop class -> short tag (the class names of include/dist_moe/device/gemm/mainloop*.cuh).
MAINLOOPS = {"Sm90Mainloop": "bf16", "Sm90Fp8BlockwiseMainloop": "fp8bw", "Sm90Mxfp8Mainloop": "mxfp8",
             "Sm90Nvfp4SwapABMainloop": "nvfp4", "Sm90BlockScaledSwapABMainloop": "blockscaled"}
CONFIG = re.compile(r"NS0_\d+(Sm90\w*?Mainloop)INS0_14MainloopConfigILNS0_8GemmKindE(\d)ELi(\d+)ELi(\d+)ELi(\d+)E"
                    r"LNS0_16ConsumerScheduleE(\d)ELNS0_11WeightSplitE(\d)ELi(\d)E")
WGMMA = re.compile(r"\b[HQIB]GMMA\b")  # the SASS of wgmma: HGMMA (BF16 / FP16), QGMMA (E4M3), ...
# Known spills, each with where it was examined. Listed with its reference, not failed:
#   the FP8-blockwise 128x256 consumers hold 128 accumulators plus a 64-register scratch slice in 240
#   registers; ptxas stores 32-124 bytes and the tile is still 3-11% faster than the alternatives
#   (docs/perf_history.md G66, G69);
#   the NVFP4 swap-AB kernels (8-322 bytes) spill in their prologue, epilogue and producer warps: 0-2
#   spill instructions per stage of ~800 in the consumers' k loop (SASS of session 52, G119);
#   the BF16 W13 gather kernel with padded staging stores (8 bytes): one 4-byte store / load pair in
#   its SwiGLU epilogue's sigmoid, none in the k loop (SASS of session 52, G119).
KNOWN_SPILLS = [(re.compile(r"^fp8bw +\w+ +128x256 "), "G66"), (re.compile(r"^nvfp4 +fprop_swapab "), "G119"),
                (re.compile(r"^bf16 +fprop +128x256 s4 split SwigluEpilogue gather$"), "G119")]


def known_spill(name):
    """The perf_history reference of a kernel whose spills are known, else None."""
    return next((ref for pattern, ref in KNOWN_SPILLS if pattern.match(name)), None)


def describe(mangled):
    """'fp8bw fprop 128x256 s4 c2 split SwigluEpilogue tma' from a mangled sm90_grouped_gemm
    instantiation; None for other kernels."""
    m = CONFIG.search(mangled)
    if not m or "sm90_grouped_gemm" not in mangled:
        return None
    mainloop, kind, bm, bn, stages, pingpong, split, cluster = m.groups()
    tag = MAINLOOPS.get(mainloop, mainloop)
    if "Fp8BlockwiseSwapABScales" in mangled:
        tag = "fp8bw"
    elif "Mxfp8SwapABScales" in mangled:
        tag = "mxfp8"
    epi = re.search(r"NS0_\d+([A-Za-z0-9]*Epilogue)I", mangled[m.end():])
    epi = epi.group(1) if epi else "?"
    if epi == "StoreEpilogue":
        epi += "<fp32>" if re.search(r"StoreEpilogueIS\w_f", mangled) else "<bf16>"
    name = (f"{tag:<6} {KINDS[kind]:<12} {bm}x{bn} s{stages} {'c' + cluster + ' ' if cluster != '1' else ''}"
            f"{'pp ' if pingpong == '1' else ''}{'split ' if split == '1' else ''}{epi}")
    if "SwizzledTmaWriter" in mangled:
        name += " tma"
    if "RowSourceE1E" in mangled:
        name += " gather"
    if re.search(r"EEELb1EEENS0_", mangled):  # the NVFP4 mainloop's second variant (its bool argument)
        name += " b1"
    return name


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
        if current in counts and WGMMA.search(line):
            counts[current] += 1
    print(f"{'kernel':<64} {'wgmma':>6}")
    missing = 0
    for f in order:
        print(f"{describe(f):<64} {counts[f]:>6}")
        missing += counts[f] == 0
    print(f"{len(order)} GEMM kernels, {'all issue wgmma' if not missing else str(missing) + ' WITHOUT wgmma'}")
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
                bad += (stack > 0 or st > 0 or ld > 0) and not known_spill(d)
            current = None
    seen = set()
    print(f"{'kernel':<64} {'regs':>4} {'stack':>5} {'spill st/ld':>11}")
    for d, regs, stack, st, ld in rows:
        if d in seen:
            continue
        seen.add(d)
        note = f"  known ({known_spill(d)})" if (stack or st or ld) and known_spill(d) else ""
        print(f"{d:<64} {regs:>4} {stack:>5} {st:>5}/{ld:<5}{note}")
    print(f"{len(seen)} GEMM kernels, {'none spill' if not bad else str(bad) + ' with stack/spills'} "
          f"beyond the known ones")
    if not seen:
        print("no GEMM kernel recognized: was the log built with DIST_MOE_PTXAS_VERBOSE, or did the mangling change?")
    return 1 if bad or not seen else 0


if __name__ == "__main__":
    sys.exit(main())
