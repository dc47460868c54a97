#!/usr/bin/env python3
"""The A / B table of alternated bench_grouped_gemm runs (scripts/gemm_ab_rounds.sh writes the rows).

  python3 scripts/gemm_ab_table.py ROWS

ROWS: lines `ROW side round shape routing op config MS ms TFLOPS TFLOP/s [cuBLAS TFLOPS ...]`, a
block-scaled pick's with `bf16 MS` (our BF16 pick, timed beside it) at the end. Per shape, routing
and op: the median ms of each side, B / A (below 1: B faster), B against cuBLAS dense (BF16 rows)
and each side's speed against our BF16 pick (block-scaled rows).
"""
import collections
import statistics
import sys


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    ms, tflops, cublas, bf16 = (collections.defaultdict(list) for _ in range(4))
    for line in open(sys.argv[1]):
        f = line.split()
        if not f or f[0] != "ROW":
            continue
        key = (f[1],) + tuple(f[3:6])  # side, shape, routing, op
        ms[key].append(float(f[7]))
        tflops[key].append(float(f[9]))
        if "cuBLAS" in f:
            cublas[key].append(float(f[f.index("cuBLAS") + 1]))
        if "bf16" in f:
            bf16[key].append(float(f[f.index("bf16") + 1]))
    med = statistics.median
    print("gemm A/B (bench_grouped_gemm, medians; block-scaled ops: the pick, x our BF16 pick timed beside it):")
    print(f"{'shape':13s} {'routing':8s} {'op':16s} {'A ms':>7s} {'B ms':>7s} {'B/A':>6s} {'B x cuBLAS':>10s} "
          f"{'x BF16 A / B':>13s}")
    for k in sorted({k[1:] for k in ms}):
        a, b = ("A",) + k, ("B",) + k
        if not ms[a] or not ms[b]:
            continue
        cb = f"{med(tflops[b]) / med(cublas[b]):.3f}" if cublas[b] else "-"
        xb = f"{med(bf16[a]) / med(ms[a]):.2f} / {med(bf16[b]) / med(ms[b]):.2f}" if bf16[a] and bf16[b] else "-"
        print(f"{k[0]:13s} {k[1]:8s} {k[2]:16s} {med(ms[a]):7.3f} {med(ms[b]):7.3f} {med(ms[b]) / med(ms[a]):6.3f} "
              f"{cb:>10s} {xb:>13s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
