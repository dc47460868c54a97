#!/usr/bin/env python3
"""The A / B (/ C ...) table of alternated `bench_quantize` runs, for the device run scripts.

  python3 scripts/quantize_ab_table.py LOGDIR [ARMS]      (ARMS: letters, default "AB")

reads LOGDIR/quantize_<arm><round>.log (any rounds) and prints, per shape and quantizer row of the
benchmark's per-case tables (the summary's rows and the rest: two passes, plain SwiGLU backward,
the layer forms), each arm's best time over its runs, the first arm's time over each other arm's
(above 1: the other arm is faster) and each arm's best "x copy". Every run script from session 49 on
pasted this table's code; with two arms the output is the one those scripts printed.
"""
import collections
import glob
import re
import sys


def read(logdir, arms):
    """{(shape, quantizer): {arm: [(ms, x copy), ...]}} in the order rows first appear."""
    vals = collections.OrderedDict()
    for f in sorted(glob.glob(f"{logdir}/quantize_*.log")):
        m = re.search(r"quantize_([A-Z])\d+\.log$", f)
        if not m or m.group(1) not in arms:
            continue
        shape = None
        for line in open(f):
            h = re.match(r"^(dsv3_prefill|qwen3_30b|mixtral|dsv3_decode)\b", line)
            if h:
                shape = h.group(1)
            # a per-case row: name, MB moved, ms, GB/s, copy ms, x copy
            row = re.match(r"^(\S+)\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s+([\d.]+)\s+([\d.]+)x$", line.strip())
            if row and shape:
                d = vals.setdefault((shape, row.group(1)), collections.defaultdict(list))
                d[m.group(1)].append((float(row.group(2)), float(row.group(4))))
    return vals


def main():
    logdir = sys.argv[1]
    arms = sys.argv[2] if len(sys.argv) > 2 else "AB"
    first, others = arms[0], arms[1:]
    head = f"{'shape':13s} {'quantizer':22s}" + "".join(f" {a + ' ms':>8s}" for a in arms)
    head += "".join(f" {first + '/' + a:>6s}" for a in others) + "".join(f" {a + ' x copy':>9s}" for a in arms)
    print(head)
    for (shape, q), d in read(logdir, arms).items():
        if any(not d[a] for a in arms):
            continue
        best = {a: min(x[0] for x in d[a]) for a in arms}
        copy = {a: max(x[1] for x in d[a]) for a in arms}
        line = f"{shape:13s} {q:22s}" + "".join(f" {best[a]:8.4f}" for a in arms)
        line += "".join(f" {best[first] / best[a]:6.3f}" for a in others) + "".join(f" {copy[a]:9.2f}" for a in arms)
        print(line)


if __name__ == "__main__":
    main()
