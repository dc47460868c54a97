#!/usr/bin/env python3
"""Stall samples and executed instructions of one kernel by CUDA source line.

Input: the CSV of `ncu --import R.ncu-rep --page source --csv --print-source cuda,sass` for a kernel
built with -lineinfo (the project's default) and profiled with --section SourceCounters. Prints each
file's share of the warp stall samples, then the N lines with the most samples: share of samples,
share of executed instructions, file:line, and the line's three largest stall reasons.

  scripts/ncu_by_line.py page.csv [N]
"""
import collections
import csv
import sys


def by_line(path):
    agg = collections.defaultdict(collections.Counter)
    current, header = None, None
    for row in csv.reader(open(path)):
        if not row:
            continue
        if row[0] == "File Path":
            current = row[1].split("/")[-1]
            continue
        if row[0] == "Line No":
            header = row
            samples = header.index("Warp Stall Sampling (All Samples)")
            executed = header.index("Instructions Executed")
            reasons = [i for i, h in enumerate(header) if h.startswith("stall_") and "Not Issued" not in h]
            continue
        if header is None or row[0] == "Function Name" or not row[0].isdigit():
            continue
        if row[2] not in ("", "-"):  # a SASS row under its source line: counted in the line's row
            continue
        key = f"{current}:{row[0]}"
        for i in reasons:
            agg[key][header[i][len("stall_"):]] += int(row[i].replace(",", "") or 0)
        agg[key]["_samples"] += int(row[samples].replace(",", "") or 0)
        agg[key]["_executed"] += int(row[executed].replace(",", "") or 0)
    return agg


def main():
    agg = by_line(sys.argv[1])
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    samples = sum(v["_samples"] for v in agg.values()) or 1
    executed = sum(v["_executed"] for v in agg.values()) or 1
    files = collections.Counter()
    for key, v in agg.items():
        files[key.split(":")[0]] += v["_samples"]
    print("samples by file:", ", ".join(f"{f} {n / samples:.3f}" for f, n in files.most_common(12)))
    print(f"{'samples':>7s} {'instr':>6s}  line")
    for key, v in sorted(agg.items(), key=lambda kv: -kv[1]["_samples"])[:top]:
        why = [(r, n) for r, n in v.most_common() if not r.startswith("_")][:3]
        reasons = "  ".join(f"{r}:{n / max(v['_samples'], 1):.2f}" for r, n in why)
        print(f"{v['_samples'] / samples:7.3f} {v['_executed'] / executed:6.3f}  {key:40s} {reasons}")


if __name__ == "__main__":
    main()
