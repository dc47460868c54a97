#!/usr/bin/env python3
"""Time per layer against EP size, from `dist-moe bench` logs (issue #8's scaling record).

    python3 scripts/plot_scaling.py bench_ep2.log bench_ep4.log bench_ep8.log --svg docs/scaling.svg

Reads every "dist-moe bench: <shape> (...), <mode>, <N> GPU(s)" section and its "measure" table,
prints one markdown table (shape, mode, measure, EP size, ours ms, stock-PyTorch EP ms, speedup)
and, with --svg, writes a line chart per (shape, measure): ours solid, the stock EP layer dashed,
one panel per shape. Standard library only, so it runs on any machine.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections import defaultdict

HEADER = re.compile(r"dist-moe bench: (\w+) .*?, (\w+), (\d+) GPU\(s\)")
ROW = re.compile(r"^(forward\+backward|inference forward|forward)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x")


def parse(text: str) -> list[dict]:
    """Rows {shape, mode, gpus, measure, ours_ms, gemm_ms, torch_ms, speedup} of every section."""
    rows, section = [], None
    for line in text.splitlines():
        h = HEADER.search(line)
        if h:
            section = {"shape": h.group(1), "mode": h.group(2), "gpus": int(h.group(3))}
            continue
        m = ROW.match(line.strip())
        if m and section:
            rows.append(dict(section, measure=m.group(1), ours_ms=float(m.group(2)), gemm_ms=float(m.group(3)),
                             torch_ms=float(m.group(4)), speedup=float(m.group(5))))
    return rows


def markdown(rows: list[dict]) -> str:
    out = ["| shape | mode | measure | EP | ours ms | stock EP ms | speedup |", "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for r in sorted(rows, key=lambda r: (r["shape"], r["mode"], r["measure"], r["gpus"])):
        out.append(f"| {r['shape']} | {r['mode']} | {r['measure']} | {r['gpus']} | {r['ours_ms']:.3f} | "
                   f"{r['torch_ms']:.3f} | {r['speedup']:.2f}x |")
    return "\n".join(out)


def svg(rows: list[dict]) -> str:
    """One panel per shape; x = EP size (log2), y = ms; a line per (measure, ours|stock)."""
    panels = defaultdict(list)
    for r in rows:
        panels[r["shape"]].append(r)
    pw, ph, pad = 360, 240, 48
    width = pw * max(len(panels), 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{ph + 40}" font-family="sans-serif" '
             f'font-size="11">']
    colors = {"forward": "#1f77b4", "forward+backward": "#d62728", "inference forward": "#2ca02c"}
    for i, (shape, rs) in enumerate(sorted(panels.items())):
        x0 = i * pw
        eps = sorted({r["gpus"] for r in rs})
        ymax = max(max(r["ours_ms"], r["torch_ms"]) for r in rs) * 1.1
        lo, hi = math.log2(eps[0]), math.log2(eps[-1]) if len(eps) > 1 else math.log2(eps[0]) + 1

        def X(ep, lo=lo, hi=hi, x0=x0):
            return x0 + pad + (math.log2(ep) - lo) / (hi - lo) * (pw - 2 * pad)

        def Y(ms, ymax=ymax):
            return ph - pad + 20 - ms / ymax * (ph - 2 * pad)

        parts.append(f'<text x="{x0 + pw / 2}" y="16" text-anchor="middle" font-weight="bold">{shape}</text>')
        parts.append(f'<line x1="{x0 + pad}" y1="{Y(0)}" x2="{x0 + pw - pad}" y2="{Y(0)}" stroke="black"/>')
        parts.append(f'<line x1="{x0 + pad}" y1="{Y(0)}" x2="{x0 + pad}" y2="{Y(ymax)}" stroke="black"/>')
        parts.append(f'<text x="{x0 + 6}" y="{Y(ymax) + 4}">{ymax:.1f} ms</text>')
        for ep in eps:
            parts.append(f'<text x="{X(ep)}" y="{Y(0) + 14}" text-anchor="middle">EP{ep}</text>')
        by_measure = defaultdict(list)
        for r in rs:
            by_measure[r["measure"]].append(r)
        for j, (measure, ms) in enumerate(sorted(by_measure.items())):
            ms.sort(key=lambda r: r["gpus"])
            color = colors.get(measure, "#555555")
            for key, dash in (("ours_ms", ""), ("torch_ms", ' stroke-dasharray="5,3"')):
                pts = " ".join(f"{X(r['gpus']):.1f},{Y(r[key]):.1f}" for r in ms)
                parts.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
            parts.append(f'<text x="{x0 + pad + 4}" y="{30 + 12 * j}" fill="{color}">{measure} (dashed: stock EP)</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--svg", help="write the chart here")
    a = ap.parse_args()
    rows = []
    for path in a.logs:
        with open(path) as f:
            rows += parse(f.read())
    if not rows:
        print("no dist-moe bench sections found", file=sys.stderr)
        return 1
    print(markdown(rows))
    if a.svg:
        with open(a.svg, "w") as f:
            f.write(svg(rows))
        print(f"wrote {a.svg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
