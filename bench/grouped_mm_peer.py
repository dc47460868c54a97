#!/usr/bin/env python3
"""torch._grouped_mm on the grouped-GEMM benchmark's shapes and counts: the peer we must match.

Same shapes, EP=2 per-rank sizes and routing counts as bench/bench_grouped_gemm.cu (counts_for()
is the same formula), timed with CUDA events (median). Ops and what torch runs for them:

  w13_fprop       h1 = _grouped_mm(x, W13^T) then h2 = silu(h1[:, :F]) * h1[:, F:]   (SwiGLU separate)
  w13_fprop_noh1  same (torch cannot drop h1)
  w2_fprop        h3 = _grouped_mm(h2, W2^T)
  w13_dgrad       grad_x  = _grouped_mm(grad_h1, W13)
  w2_dgrad        grad_h2 = _grouped_mm(grad_h3, W2)
  w13_wgrad       grad_W13 = _grouped_mm(grad_h1^T, x)     (K-grouped, BF16 out)
  w2_wgrad        grad_W2  = _grouped_mm(grad_h3^T, h2)

Weights are stored like ours ([E, N, K]) and passed transposed where torch wants [E, K, N].

  python3 bench/grouped_mm_peer.py [--shapes a,b] [--routing balanced,random,zipf] [--iters 10] [--csv FILE]
                                   [--sustain-ms MS]
"""
import argparse
import sys
import time

SHAPES = {  # name: (T tokens/rank, D, F, E global, K); mirrors src/core/workloads.cpp
    "dsv3_prefill": (4096, 7168, 2048, 256, 8),
    "qwen3_30b": (8192, 2048, 768, 128, 8),
    "mixtral": (4096, 4096, 14336, 8, 2),
    "dsv3_decode": (128, 7168, 2048, 256, 8),
}
EP = 2  # --ep


MASK64 = (1 << 64) - 1


def splitmix64(state):
    """One step of splitmix64: (new state, output); identical to the C++ benchmark's."""
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def random_topk_counts(rows, E, top_k):
    """"random": real top-k routing's per-expert rows. Tokens pick top_k distinct experts uniformly
    among the E * EP global experts (splitmix64, seed 0x5EED); this rank owns experts [0, E) and
    keeps receiving routes until it has exactly `rows` (the last token's routes may be cut), so the
    total matches the other modes while each expert gets ~rows/E +- sqrt(rows/E)."""
    eg = E * EP
    state = 0x5EED
    c = [0] * E
    got = 0
    while got < rows:
        chosen = []
        while len(chosen) < top_k:
            state, z = splitmix64(state)
            e = z % eg
            if e not in chosen:
                chosen.append(e)
        for e in chosen:
            if e < E and got < rows:
                c[e] += 1
                got += 1
    return c


def counts_for(rows, E, routing, top_k=8):
    """Rows per expert; identical to counts_for() in bench_grouped_gemm.cu."""
    if routing == "random":
        return random_topk_counts(rows, E, top_k)
    w = [1.0 / float(e + 1) if routing == "zipf" else 1.0 for e in range(E)]
    total = 0.0
    for x in w:
        total += x
    c = [int(float(rows) * w[e] / total) for e in range(E)]
    rem = rows - sum(c)
    for i in range(rem):
        c[i % E] += 1
    return c


def checksum(c):
    return sum((e + 1) * v for e, v in enumerate(c))


def main():
    global EP  # --ep sets the per-rank sizes that counts_for() and the shapes use
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--routing", default="balanced,random,zipf")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--ep", type=int, default=EP, help="per-rank sizes at this EP size (E / ep local experts)")
    ap.add_argument("--csv", default="")
    ap.add_argument("--sustain-ms", type=float, default=0.0,
                    help="run each op this long untimed before timing it (the C++ benchmark's --sustain-ms)")
    args = ap.parse_args()
    EP = args.ep

    import torch
    import torch.nn.functional as Fn

    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 0
    if not hasattr(torch, "_grouped_mm"):
        print("SKIP: this torch has no _grouped_mm")
        return 0

    def bench(fn, iters):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        while (time.perf_counter() - t0) * 1e3 < args.sustain_ms:  # same power state as ours
            for _ in range(4):
                fn()
            torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ts = []
        for _ in range(iters):
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e))
        ts.sort()
        return ts[len(ts) // 2]

    out = open(args.csv, "w") if args.csv else None
    if out:
        out.write("shape,routing,op,ms,tflops,note\n")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    dev = "cuda"
    for name in args.shapes.split(","):
        T, D, F, E, K = SHAPES[name]
        E_local = E // EP
        M = T * K
        decode = T <= 256
        for routing in args.routing.split(","):
            counts = counts_for(M, E_local, routing, K)
            print(f"\n== {name} routing={routing} E_local={E_local} rows={M} counts: max {max(counts)} "
                  f"min {min(counts)} checksum {checksum(counts)}")
            offs = torch.tensor(counts, device=dev, dtype=torch.int32).cumsum(0).to(torch.int32)
            g = torch.Generator(device=dev).manual_seed(0)
            x = torch.randn(M, D, device=dev, dtype=torch.bfloat16, generator=g)
            w13 = torch.randn(E_local, 2 * F, D, device=dev, dtype=torch.bfloat16, generator=g) * 0.02
            w2 = torch.randn(E_local, D, F, device=dev, dtype=torch.bfloat16, generator=g) * 0.02
            h1 = torch.randn(M, 2 * F, device=dev, dtype=torch.bfloat16, generator=g)
            h2 = torch.randn(M, F, device=dev, dtype=torch.bfloat16, generator=g)
            h3 = torch.randn(M, D, device=dev, dtype=torch.bfloat16, generator=g)

            def row(op, ms, flops, note=""):
                tf = flops / (ms * 1e9)
                print(f"{name:13s} {routing:8s} {op:15s} {ms:9.3f} ms {tf:8.1f} TFLOP/s {note}")
                if out:
                    out.write(f"{name},{routing},{op},{ms:.5f},{tf:.2f},{note}\n")
                    out.flush()

            def try_bench(op, fn, flops):
                try:
                    row(op, bench(fn, args.iters), flops)
                except Exception as exc:  # a torch build without one of the layouts
                    print(f"{name:13s} {routing:8s} {op:15s} unsupported: {str(exc).splitlines()[0]}")
                    if out:
                        out.write(f"{name},{routing},{op},nan,nan,unsupported\n")

            f13 = 2.0 * M * 2 * F * D
            f2 = 2.0 * M * D * F
            w13t = w13.transpose(-2, -1)  # [E, D, 2F] view of our [E, 2F, D]
            w2t = w2.transpose(-2, -1)

            def w13_fprop():
                h = torch._grouped_mm(x, w13t, offs=offs)
                gg, uu = h.chunk(2, dim=-1)
                return Fn.silu(gg) * uu

            try_bench("w13_fprop", w13_fprop, f13)
            try_bench("w2_fprop", lambda: torch._grouped_mm(h2, w2t, offs=offs), f2)
            if decode:
                continue
            try_bench("w13_fprop_noh1", w13_fprop, f13)
            try_bench("w13_dgrad", lambda: torch._grouped_mm(h1, w13, offs=offs), f13)
            try_bench("w2_dgrad", lambda: torch._grouped_mm(h3, w2, offs=offs), f2)
            try_bench("w13_wgrad", lambda: torch._grouped_mm(h1.t(), x, offs=offs), f13)
            try_bench("w2_wgrad", lambda: torch._grouped_mm(h3.t(), h2, offs=offs), f2)
            del x, w13, w2, h1, h2, h3
            torch.cuda.empty_cache()
    if out:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
