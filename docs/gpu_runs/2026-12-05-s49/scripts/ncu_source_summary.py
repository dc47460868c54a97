#!/usr/bin/env python3
"""Summarize an `ncu --page source --csv --print-source sass` export: the kernel's L2 sectors and
shared wavefronts against their ideal, the instructions with the most excess of each, and the
instructions with the most stall samples (with their top stall reasons)."""
import csv
import sys


def num(row, ix, key):
    v = row[ix[key]].replace(",", "") if key in ix else ""
    try:
        return float(v)
    except ValueError:
        return 0.0


def main(path, top=6):
    rows = list(csv.reader(open(path)))
    if len(rows) < 3:
        print(f"{path}: no source rows")
        return
    hdr = rows[1]
    ix = {h: i for i, h in enumerate(hdr)}
    data = rows[2:]
    keys = ["L2 Theoretical Sectors Global", "L2 Theoretical Sectors Global Ideal",
            "L2 Theoretical Sectors Global Excessive", "L1 Wavefronts Shared", "L1 Wavefronts Shared Ideal",
            "L1 Wavefronts Shared Excessive", "Warp Stall Sampling (All Samples)", "Instructions Executed"]
    tot = {k: sum(num(r, ix, k) for r in data) for k in keys}
    print("  " + ", ".join(f"{k.replace('L2 Theoretical ', '').replace('Warp Stall Sampling ', 'samples ')}: {v:.0f}"
                           for k, v in tot.items()))
    stalls = [h for h in hdr if h.startswith("stall_") and "(Not Issued)" not in h]
    for key in ["L2 Theoretical Sectors Global Excessive", "L1 Wavefronts Shared Excessive",
                "Warp Stall Sampling (All Samples)"]:
        order = sorted(range(len(data)), key=lambda i: -num(data[i], ix, key))[:top]
        print(f"  top by {key}:")
        for i in order:
            r = data[i]
            if num(r, ix, key) == 0:
                break
            reasons = sorted(((num(r, ix, s), s[6:]) for s in stalls), reverse=True)[:3]
            rs = " ".join(f"{n}={v:.0f}" for v, n in reasons if v > 0)
            print(f"    {i:5d} {r[ix['Source']].strip()[:58]:58s} {num(r, ix, key):>10.0f}  inst {num(r, ix, 'Instructions Executed'):>8.0f}  {rs}")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(p)
        main(p)
