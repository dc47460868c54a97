#!/usr/bin/env python3
"""The A / B table of alternated bench_grouped_gemm runs' block-scaled pick rows.

  python3 scripts/gemm_ab_table.py ROWS

ROWS: lines `ROW side round <the pick's row>`, as a run script writes them from each side's
bench_grouped_gemm output (`awk '$1 == "fp8" && $6 == "(pick)" {print "ROW", side, round, $0}'`:
the FP8-blockwise, MXFP8 and NVFP4 picks, each with our BF16 pick's time beside it). Per shape and
op: the median ms of each side, B / A (below 1: B faster) and each side's speed against our BF16
pick timed beside it. The docs/gpu_runs run scripts since session 51 print it last.
"""
import collections
import statistics
import sys


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    ms, bf16 = collections.defaultdict(list), collections.defaultdict(list)
    for line in open(sys.argv[1]):
        f = line.split()
        # ROW side round fp8 shape routing op config (pick) MS ms TFLOPS TFLOP/s bf16 BF16_MS ms ...
        if len(f) < 15 or f[0] != "ROW" or f[8] != "(pick)" or f[13] != "bf16":
            continue
        key = (f[1], f[4], f[6])  # side, shape, op
        ms[key].append(float(f[9]))
        bf16[key].append(float(f[14]))
    med = statistics.median
    print(f"{'shape':12s} {'op':16s} {'A ms':>7s} {'B ms':>7s} {'B/A':>6s}  x BF16 A / B (BF16 timed beside each)")
    for shape, op in sorted({k[1:] for k in ms}):
        a, b = ms[("A", shape, op)], ms[("B", shape, op)]
        if a and b:
            print(f"{shape:12s} {op:16s} {med(a):7.3f} {med(b):7.3f} {med(b) / med(a):6.3f}  "
                  f"{med(bf16[('A', shape, op)]) / med(a):.2f} / {med(bf16[('B', shape, op)]) / med(b):.2f}   "
                  f"A {a} B {b}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
