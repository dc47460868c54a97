"""Tables of the gemm stage of scripts/gpu_check.sh (scripts/gpu_stages/gemm.sh).

  gemm_tables.py join BENCH_CSV PEER_CSV   ours / cuBLAS, ours / torch per (shape, routing, op), the
                                           targets, the geometric means of x torch, the sweep table
  gemm_tables.py ab BENCH_CSV EXP_CSV      default heuristic vs DMOE_GEMM_EXPERIMENTAL=1
A missing CSV counts as empty.
"""
import csv
import math
import sys
from collections import defaultdict


def load(path):
    try:
        return list(csv.DictReader(open(path)))
    except OSError:
        return []


def join(bench_csv, peer_csv):
    ours, peer = load(bench_csv), load(peer_csv)
    torch_tf = {(r["shape"], r["routing"], r["op"]): float(r["tflops"]) for r in peer if r["tflops"] not in ("nan", "")}
    fmt = lambda v: f"{'-':>8s}" if v is None or math.isnan(v) else f"{v:8.2f}"

    print(f"{'shape':13s} {'routing':8s} {'op':15s} {'config':27s} {'ms':>8s} {'TFLOP/s':>8s} {'x cuBLAS':>8s} {'x torch':>8s} {'other':>16s}")
    met = total = 0
    main = [r for r in ours if r["kind"] != "sweep"]
    balanced = {(r["shape"], r["op"]): float(r["tflops"]) for r in main if r["routing"] == "balanced"}
    xt_by_op = defaultdict(list)
    for r in main:
        tf = float(r["tflops"])
        t = torch_tf.get((r["shape"], r["routing"], r["op"]))
        xt = tf / t if t else float("nan")
        xc, other = float("nan"), ""
        ok = True
        if r["kind"] == "compute":
            xc = tf / float(r["cublas_tflops"])
            ok = xc >= 0.80 and (t is None or xt >= 1.0 or r["op"].endswith("_fp32"))
            if r["routing"] in ("zipf", "random") and (r["shape"], r["op"]) in balanced:
                z = tf / balanced[(r["shape"], r["op"])]
                other = f"{r['routing'][:4]}/bal {z:.2f}"
                ok = ok and z >= 0.90
            if r["routing"] == "balanced" and t and not r["op"].endswith("_fp32") and r["shape"] != "dsv3_decode":
                xt_by_op[r["op"]].append(xt)
        elif r["kind"] == "decode":
            bw = float(r["gbps"]) / float(r["copy_gbps"])
            other = f"HBM {bw:.2f}"
            ok = bw >= 0.80 and (t is None or xt >= 1.0)
        else:
            v = float(r["contiguous_ms"]) / float(r["ms"])
            other = f"vs contig {v:.2f}"
            ok = v >= 0.90
        met += ok
        total += 1
        print(f"{r['shape']:13s} {r['routing']:8s} {r['op']:15s} {r['config']:27s} {float(r['ms']):8.3f} {tf:8.1f} "
              f"{fmt(xc)} {fmt(xt)} {other:>16s} {'MET' if ok else 'MISSED'}")
    print(f"targets met: {met} of {total}  (compute: >= 0.80 x cuBLAS, >= 1.0 x torch, zipf and random >= 0.90 x balanced; "
          f"decode: >= 0.80 of HBM copy; gather/scatter: >= 0.90 of contiguous)")
    print("geometric mean of x torch over the balanced prefill shapes (target >= 1.10):")
    for op, v in sorted(xt_by_op.items()):
        g = math.exp(sum(math.log(x) for x in v) / len(v))
        print(f"  {op:15s} {g:6.3f}  over {len(v)} shapes  {'MET' if g >= 1.10 else 'MISSED'}")

    # Sweep: every configuration of every (shape, routing, op); '*' = fastest, '<' = the heuristic's pick.
    sweep = defaultdict(list)
    for r in ours:
        if r["op"] == "w13_fprop_noh1" or r["kind"] == "variant" and r["op"] != "w13_gather":
            continue
        sweep[(r["shape"], r["routing"], r["op"])].append(r)
    if any(r["kind"] == "sweep" for r in ours):
        print()
        print("configuration sweep ('*' fastest, '<' heuristic):")
        print(f"{'shape':13s} {'routing':8s} {'op':15s} {'config':27s} {'ms':>8s} {'TFLOP/s':>8s} {'x cuBLAS':>8s} {'x torch':>8s}")
        wins = 0
        for key, rows in sweep.items():
            best = min(float(r["ms"]) for r in rows)
            heuristic = [r for r in rows if r["kind"] != "sweep"]
            h_ms = float(heuristic[0]["ms"]) if heuristic else float("nan")
            wins += h_ms <= best * 1.02
            t = torch_tf.get(key)
            for r in sorted(rows, key=lambda r: float(r["ms"])):
                tf = float(r["tflops"])
                cb = float(r["cublas_tflops"] or 0)
                mark = ("*" if float(r["ms"]) == best else " ") + ("<" if r["kind"] != "sweep" else " ")
                print(f"{key[0]:13s} {key[1]:8s} {key[2]:15s} {r['config']:27s} {float(r['ms']):8.3f} {tf:8.1f} "
                      f"{fmt(tf / cb if cb > 0 else None)} {fmt(tf / t if t else None)} {mark}")
        print(f"heuristic within 2% of the fastest configuration: {wins} of {len(sweep)}")


def ab(bench_csv, exp_csv):
    base = {(r["shape"], r["routing"], r["op"]): r for r in load(bench_csv) if r["kind"] != "sweep"}
    exp = [r for r in load(exp_csv) if r["kind"] != "sweep"]
    print()
    print("A/B: default heuristic vs DMOE_GEMM_EXPERIMENTAL=1 (ratio > 1: experimental faster)")
    print(f"{'shape':13s} {'routing':8s} {'op':15s} {'default':27s} {'ms':>8s} {'experimental':31s} {'ms':>8s} {'ratio':>6s}")
    bal = {}
    for r in exp:
        if r["routing"] == "balanced":
            bal[(r["shape"], r["op"])] = float(r["ms"])
    for r in exp:
        b = base.get((r["shape"], r["routing"], r["op"]))
        if b is None:
            continue
        bm, em = float(b["ms"]), float(r["ms"])
        tail = ""
        if r["routing"] != "balanced" and (r["shape"], r["op"]) in bal:
            tail = f"  exp {r['routing']}/bal {bal[(r['shape'], r['op'])] / em:.2f}"
        print(f"{r['shape']:13s} {r['routing']:8s} {r['op']:15s} {b['config']:27s} {bm:8.3f} {r['config']:31s} {em:8.3f} "
              f"{bm / em:6.2f}{tail}")
    for shape in sorted({k[0] for k in base}):
        for routing in ("balanced", "random", "zipf"):
            ops = ("w13_fprop_noh1", "w2_fprop")
            d = [base.get((shape, routing, o)) for o in ops]
            e = [next((r for r in exp if (r["shape"], r["routing"], r["op"]) == (shape, routing, o)), None) for o in ops]
            if all(d) and all(e):
                print(f"{shape} {routing}: W13(noh1)+W2 forward default {sum(float(x['ms']) for x in d):.3f} ms, "
                      f"experimental {sum(float(x['ms']) for x in e):.3f} ms")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("join", "ab"):
        sys.exit(__doc__)
    (join if sys.argv[1] == "join" else ab)(sys.argv[2], sys.argv[3])
