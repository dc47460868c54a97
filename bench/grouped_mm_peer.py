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

--fp8 adds, after each op's BF16 row, the stock PyTorch FP8 peers of our FP8 GEMMs (E4M3, FP32 rowwise
scales: one per row of the row operand, one per output column per expert; BF16 output):

  fp8 grouped  torch._scaled_grouped_mm on the same groups (offs = int32 cumulative row ends)
    w13_fprop  h1 = _scaled_grouped_mm(x8, W13_8^T, sx[M], s13[E, 2F]) then the same separate SwiGLU
    w2_fprop   h3 = _scaled_grouped_mm(h2_8, W2_8^T, sh2[M], s2[E, D])
    w13_dgrad  grad_x  = _scaled_grouped_mm(grad_h1_8, (W13^T)_8^T, ...): B is [E, K, N] column-major,
               so the weight is quantized from its transposed copy [E, D, 2F] (one scale per (e, d))
    w2_dgrad   grad_h2 = _scaled_grouped_mm(grad_h3_8, (W2^T)_8^T, ...)
    w13_wgrad  grad_W13 = _scaled_grouped_mm((grad_h1^T)_8 [2F, M], ((x^T)_8)^T [M, D], s[E*2F], s[E*D])
    w2_wgrad   grad_W2  = _scaled_grouped_mm((grad_h3^T)_8, ((h2^T)_8)^T, ...)   (2d x 2d, K-grouped:
               the token-major operands are stored transposed, scales are per row per group; the
               kernel needs every K group a multiple of 16 and non-empty, so each expert's rows are
               zero-padded up to 16 (note "K groups padded to x16 (+N rows)"); FLOPs: real rows only)
  fp8 dense    torch._scaled_mm, rowwise (scale_a [m, 1], scale_b [1, n]; cuBLASLt on SM90 with cuBLAS
               >= 12.9), one dense GEMM with the grouped dimension collapsed to its total and the op's
               own N and K: fprop [M, K] x [K, N]; dgrad [M, N_w] x [N_w, K_w]; wgrad [N_w, M] x [M, K_w]
               (fprop matches the C++ bench's cuBLAS column; there dgrad/wgrad reuse fprop's M x N x K)
  bf16 dense   torch.mm on the same operands and size: the FP8 / BF16 dense ratio of this machine
Operands are random (randn, never zero), quantized outside the timed region with a real amax scale
(s = amax / 448, q = (x / s) clamped to +-448, E4M3); what is timed is the GEMM (w13_fprop: + SwiGLU,
as the BF16 row), with the same warm-up and --sustain-ms as the BF16 rows, right after them.
--fp8-csv FILE: shape,routing,op,fp8_grouped_ms,fp8_grouped_tflops,fp8_dense_ms,fp8_dense_tflops,
bf16_dense_ms,bf16_dense_tflops,note (nan where torch refused; the note says why).
use_fast_accum=False unless --fp8-fast-accum; --fp8-align-rows A pads the M-grouped ops' groups too
(not needed: torch's SM90 kernel takes any row count there, empty groups included).
--check (and the start of every --fp8 run): the FP8 peers on a small shape with uneven, unaligned and
empty groups against a float reference of the same quantized operands (relative L2 < 2e-2): PASS/FAIL.

  python3 bench/grouped_mm_peer.py [--shapes a,b] [--routing balanced,random,zipf] [--iters 10] [--csv FILE]
                                   [--sustain-ms MS] [--fp8 [--fp8-csv FILE] [--fp8-fast-accum]
                                   [--fp8-align-rows A]] [--check]
"""
import argparse
import math
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


E4M3_MAX = 448.0


class Fp8Peer:
    """The stock PyTorch FP8 peers (--fp8): E4M3 operands with FP32 rowwise scales, BF16 out.

    Each builder quantizes its operands once (untimed) and returns (run, ref, rows, note): run() the
    timed call, ref() a float reference from the same quantized operands (--check), rows an index of
    the real rows in a padded output (None: not padded), note what was changed to satisfy torch."""

    def __init__(self, torch, fast_accum=False, align_rows=1):
        self.torch = torch
        self.fast = fast_accum
        self.align_rows = align_rows  # M-grouped ops: pad each group's rows to this (1: none)
        self.dev = "cuda"

    def quant_rows(self, t):
        """One scale per row (amax over the last dim): (q contiguous E4M3, s FP32 [...rows]); 3-D
        tensors a few experts at a time (a float copy of all of W13 is ~15 GB at dsv3_prefill)."""
        torch = self.torch

        def q2(c):
            s = c.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12) / E4M3_MAX
            return (c.float() / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), s.squeeze(-1)

        if t.dim() == 2:
            return q2(t.contiguous())
        q = torch.empty(t.shape, device=t.device, dtype=torch.float8_e4m3fn)
        s = torch.empty(t.shape[:-1], device=t.device, dtype=torch.float32)
        for i in range(0, t.shape[0], 8):
            q[i:i + 8], s[i:i + 8] = q2(t[i:i + 8].contiguous())
        return q, s

    def quant_kgroups(self, t, pcounts):
        """t [R, Kpad] contiguous, K in groups of pcounts: one scale per row per group (amax over the
        group's columns); (q [R, Kpad] E4M3, s FP32 [G * R], group-major as torch reads it)."""
        torch = self.torch
        s = torch.empty(len(pcounts), t.shape[0], device=t.device, dtype=torch.float32)
        k0 = 0
        for g, c in enumerate(pcounts):
            s[g] = t[:, k0:k0 + c].abs().amax(dim=1).float() if c else 0.0
            k0 += c
        s = s.clamp(min=1e-12) / E4M3_MAX
        gid = torch.repeat_interleave(torch.arange(len(pcounts), device=t.device),
                                      torch.tensor(pcounts, device=t.device))
        q = (t.float() / s.t()[:, gid]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        return q, s.reshape(-1).contiguous()

    def pad(self, t, counts, align, nonempty):
        """t [M, X] in groups of counts -> (t padded with zero rows so that every group is a multiple
        of align (and, with nonempty, at least align), padded counts, index of the real rows or None)."""
        torch = self.torch
        pc = [-(-c // align) * align for c in counts]
        if nonempty:
            pc = [max(c, align) for c in pc]
        if pc == list(counts):
            return t, pc, None
        G = len(counts)
        start = torch.tensor([0] + counts[:-1]).cumsum(0)
        pstart = torch.tensor([0] + pc[:-1]).cumsum(0)
        gid = torch.repeat_interleave(torch.arange(G), torch.tensor(counts))
        rows = (torch.arange(sum(counts)) + (pstart - start)[gid]).to(t.device)
        out = t.new_zeros(sum(pc), t.shape[1])
        out[rows] = t
        return out, pc, rows

    def offs(self, counts):
        return self.torch.tensor(counts, device=self.dev, dtype=self.torch.int32).cumsum(0).to(self.torch.int32)

    def m_grouped(self, a, w, counts):
        """out[rows_e] = a[rows_e] . w[e]^T; a [M, K] (rows by expert), w [E, N, K] (a view is fine)."""
        torch = self.torch
        ap, pc, rows = self.pad(a, counts, self.align_rows, False)
        qa, sa = self.quant_rows(ap)
        qw, sw = self.quant_rows(w)
        offs = self.offs(pc)

        def run():
            return torch._scaled_grouped_mm(qa, qw.transpose(-2, -1), sa, sw, offs=offs,
                                            out_dtype=torch.bfloat16, use_fast_accum=self.fast)

        def ref():
            da = qa.float() * sa[:, None]
            dw = qw.float() * sw[..., None]
            out = torch.zeros(da.shape[0], dw.shape[1], device=da.device)
            r0 = 0
            for e, c in enumerate(pc):
                out[r0:r0 + c] = da[r0:r0 + c] @ dw[e].t()
                r0 += c
            return out

        extra = sum(pc) - sum(counts)
        return run, ref, rows, (f"rows padded to x{self.align_rows} (+{extra} rows)" if extra else "")

    def k_grouped(self, g, a, counts):
        """out[e] = g[rows_e]^T . a[rows_e]; g [M, R], a [M, C] (rows by expert) -> [E, R, C]."""
        torch = self.torch
        gp, pc, _ = self.pad(g, counts, 16, True)
        ap, _, _ = self.pad(a, counts, 16, True)
        qg, sg = self.quant_kgroups(gp.t().contiguous(), pc)
        qa, sa = self.quant_kgroups(ap.t().contiguous(), pc)
        del gp, ap
        offs = self.offs(pc)

        def run():
            return torch._scaled_grouped_mm(qg, qa.t(), sg, sa, offs=offs,
                                            out_dtype=torch.bfloat16, use_fast_accum=self.fast)

        def ref():
            R, C = qg.shape[0], qa.shape[0]
            dg, da = qg.float(), qa.float()
            out = torch.zeros(len(pc), R, C, device=dg.device)
            k0 = 0
            for e, c in enumerate(pc):
                out[e] = (dg[:, k0:k0 + c] * sg[e * R:(e + 1) * R, None]) @ \
                         (da[:, k0:k0 + c] * sa[e * C:(e + 1) * C, None]).t()
                k0 += c
            return out

        extra = sum(pc) - sum(counts)
        return run, ref, None, (f"K groups padded to x16 (+{extra} rows)" if extra else "")

    def dense(self, a, w):
        """out = a . w^T, a [m, k], w [n, k] (views are fine): (fp8 run, bf16 run, fp8 ref)."""
        torch = self.torch
        qa, sa = self.quant_rows(a)
        qw, sw = self.quant_rows(w)
        sa, sw = sa.view(-1, 1), sw.view(1, -1)

        def run8():
            return torch._scaled_mm(qa, qw.t(), sa, sw, out_dtype=torch.bfloat16, use_fast_accum=self.fast)

        def ref():
            return (qa.float() * sa) @ (qw.float() * sw.t()).t()

        return run8, (lambda: torch.mm(a, w.t())), ref

    def op(self, name, t, counts):
        """The FP8 peers of one op on the bench tensors t (x, w13, w2, h1, h2, h3): (grouped builder,
        dense builder); builders, so that only one op's FP8 operands are alive at a time."""
        x, w13, w2, h1, h2, h3 = (t[k] for k in ("x", "w13", "w2", "h1", "h2", "h3"))
        return {
            "w13_fprop": (lambda: self.m_grouped(x, w13, counts), lambda: self.dense(x, w13[0])),
            "w2_fprop": (lambda: self.m_grouped(h2, w2, counts), lambda: self.dense(h2, w2[0])),
            "w13_dgrad": (lambda: self.m_grouped(h1, w13.transpose(-2, -1), counts),
                          lambda: self.dense(h1, w13[0].t())),
            "w2_dgrad": (lambda: self.m_grouped(h3, w2.transpose(-2, -1), counts),
                         lambda: self.dense(h3, w2[0].t())),
            "w13_wgrad": (lambda: self.k_grouped(h1, x, counts), lambda: self.dense(h1.t(), x.t())),
            "w2_wgrad": (lambda: self.k_grouped(h3, h2, counts), lambda: self.dense(h3.t(), h2.t())),
        }[name]


def rel_l2(out, ref):
    return float((out.float() - ref).norm() / ref.norm().clamp(min=1e-30))


def fp8_check(torch, fast_accum, align_rows):
    """The FP8 peers on a small shape with uneven, unaligned and empty groups, against a float
    reference of the same quantized operands; True when every op is within 2e-2 (relative L2)."""
    E, D, F = 4, 256, 192
    counts = [37, 0, 101, 118]  # not multiples of 16, one expert without rows
    M = sum(counts)
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(1)
    t = {"x": torch.randn(M, D, device=dev, dtype=torch.bfloat16, generator=g),
         "w13": torch.randn(E, 2 * F, D, device=dev, dtype=torch.bfloat16, generator=g) * 0.02,
         "w2": torch.randn(E, D, F, device=dev, dtype=torch.bfloat16, generator=g) * 0.02,
         "h1": torch.randn(M, 2 * F, device=dev, dtype=torch.bfloat16, generator=g),
         "h2": torch.randn(M, F, device=dev, dtype=torch.bfloat16, generator=g),
         "h3": torch.randn(M, D, device=dev, dtype=torch.bfloat16, generator=g)}
    peer = Fp8Peer(torch, fast_accum, align_rows)
    bounds = [sum(counts[:e]) for e in range(E + 1)]
    f = {k: v.float() for k, v in t.items()}

    def m_ref(a, w):  # unquantized: out[rows_e] = a[rows_e] . w[e]^T
        return torch.cat([a[bounds[e]:bounds[e + 1]] @ w[e].t() for e in range(E)])

    def k_ref(g, a):  # unquantized: out[e] = g[rows_e]^T . a[rows_e]
        return torch.stack([g[bounds[e]:bounds[e + 1]].t() @ a[bounds[e]:bounds[e + 1]] for e in range(E)])

    unquantized = {  # information only: the FP8 quantization error itself
        "w13_fprop": lambda: m_ref(f["x"], f["w13"]),
        "w2_fprop": lambda: m_ref(f["h2"], f["w2"]),
        "w13_dgrad": lambda: m_ref(f["h1"], f["w13"].transpose(-2, -1)),
        "w2_dgrad": lambda: m_ref(f["h3"], f["w2"].transpose(-2, -1)),
        "w13_wgrad": lambda: k_ref(f["h1"], f["x"]),
        "w2_wgrad": lambda: k_ref(f["h3"], f["h2"]),
    }
    ok = True
    print(f"FP8 check: E={E} counts={counts} D={D} F={F}, reference = float GEMM of the dequantized operands")
    for name in unquantized:
        build_g, build_d = peer.op(name, t, counts)
        line = f"  {name:10s}"
        try:
            run, ref, rows, note = build_g()
            out, r = run(), ref()
            if rows is not None:
                out, r = out[rows], r[rows]
            err = rel_l2(out, r)
            q_err = rel_l2(out, unquantized[name]())
            good = err < 2e-2 and out.shape == r.shape
            ok &= good
            line += f" grouped rel L2 {err:.2e} {'ok' if good else 'BAD'} (vs unquantized {q_err:.2e}) {note}"
        except Exception as exc:  # an unsupported op is a failed check: the bench would print n/a
            ok = False
            line += f" grouped FAILED: {str(exc).splitlines()[0]}"
        try:
            run8, _, ref = build_d()
            err = rel_l2(run8(), ref())
            ok &= err < 2e-2
            line += f" | dense rel L2 {err:.2e} {'ok' if err < 2e-2 else 'BAD'}"
        except Exception as exc:
            ok = False
            line += f" | dense FAILED: {str(exc).splitlines()[0]}"
        print(line)
    torch.cuda.synchronize()
    print(f"FP8 check: {'PASS' if ok else 'FAIL'}")
    return ok


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
    ap.add_argument("--fp8", action="store_true",
                    help="also time the stock FP8 peers: torch._scaled_grouped_mm (rowwise E4M3) on the same "
                         "groups, dense torch._scaled_mm and dense BF16 torch.mm of the same size")
    ap.add_argument("--fp8-csv", default="", help="with --fp8: the FP8 rows as CSV")
    ap.add_argument("--fp8-fast-accum", action="store_true",
                    help="use_fast_accum=True in the FP8 calls (default False: no fast accumulation)")
    ap.add_argument("--fp8-align-rows", type=int, default=1,
                    help="pad each expert's rows of the M-grouped FP8 ops to a multiple of this (default 1: "
                         "no padding, torch's SM90 kernel takes any group size there)")
    ap.add_argument("--check", action="store_true",
                    help="only check the FP8 peers against a float reference on a small shape: PASS/FAIL")
    args = ap.parse_args()
    EP = args.ep

    import torch
    import torch.nn.functional as Fn

    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 0
    if args.check:
        print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
        return 0 if fp8_check(torch, args.fp8_fast_accum, args.fp8_align_rows) else 1
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
    fp8_out = None
    bf16_grouped = {}  # (shape, routing, op) -> torch._grouped_mm ms, for the FP8 summary
    fp8_rows = []  # (fp8 grouped ms, fp8 dense ms, bf16 dense ms, bf16 grouped ms) per FP8 row
    if args.fp8:
        check_ok = fp8_check(torch, args.fp8_fast_accum, args.fp8_align_rows)
        if args.fp8_csv:
            fp8_out = open(args.fp8_csv, "w")
            fp8_out.write("shape,routing,op,fp8_grouped_ms,fp8_grouped_tflops,fp8_dense_ms,fp8_dense_tflops,"
                          "bf16_dense_ms,bf16_dense_tflops,note\n")
        print("FP8 rows: fp8 grouped = torch._scaled_grouped_mm rowwise E4M3; dense = one GEMM of the op's total "
              f"size, torch._scaled_mm rowwise E4M3 and BF16 torch.mm; use_fast_accum={args.fp8_fast_accum}")
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
                bf16_grouped[(name, routing, op)] = ms
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
            tensors = {"x": x, "w13": w13, "w2": w2, "h1": h1, "h2": h2, "h3": h3}
            peer = Fp8Peer(torch, args.fp8_fast_accum, args.fp8_align_rows) if args.fp8 else None

            def fp8_bench(op, flops):
                """The FP8 peers of op, right after its BF16 row: grouped, dense FP8, dense BF16."""
                if not args.fp8:
                    return
                build_g, build_d = peer.op(op, tensors, counts)
                res, notes = [], []

                def timed(what, build):
                    try:
                        res.append(bench(build(), args.iters))
                    except Exception as exc:  # torch refused: n/a, never a substitute
                        res.append(float("nan"))
                        notes.append(f"{what} unsupported: {str(exc).splitlines()[0]}")
                    torch.cuda.empty_cache()

                def grouped():
                    run, _, _, note = build_g()
                    if note:
                        notes.append(note)
                    if op == "w13_fprop":
                        notes.append("+SwiGLU as the BF16 row")

                        def with_swiglu():
                            gg, uu = run().chunk(2, dim=-1)
                            return Fn.silu(gg) * uu
                        return with_swiglu
                    return run

                dense = []  # (fp8 run, bf16 run, ref): built once for both dense rows

                def dense_fn(i):
                    if not dense:
                        dense.append(build_d())
                    return dense[0][i]

                timed("fp8 grouped", grouped)
                timed("fp8 dense", lambda: dense_fn(0))
                timed("bf16 dense", lambda: dense_fn(1))
                dense.clear()
                if args.fp8_fast_accum:
                    notes.append("fast_accum")
                note = "; ".join(notes).replace(",", ";")

                def fmt(ms):  # ms is nan where torch refused
                    if ms != ms:
                        return f"{'n/a':>9s} ms {'n/a':>7s} TF"
                    return f"{ms:9.3f} ms {flops / (ms * 1e9):7.1f} TF"

                print(f"{name:13s} {routing:8s} {op:15s} fp8 grouped {fmt(res[0])} | fp8 dense {fmt(res[1])} | "
                      f"bf16 dense {fmt(res[2])} {note}")
                if fp8_out:
                    cols = ",".join(f"{ms:.5f},{flops / (ms * 1e9):.2f}" if ms == ms else "nan,nan" for ms in res)
                    fp8_out.write(f"{name},{routing},{op},{cols},{note}\n")
                    fp8_out.flush()
                fp8_rows.append((*res, bf16_grouped.get((name, routing, op), float("nan"))))

            w13t = w13.transpose(-2, -1)  # [E, D, 2F] view of our [E, 2F, D]
            w2t = w2.transpose(-2, -1)

            def w13_fprop():
                h = torch._grouped_mm(x, w13t, offs=offs)
                gg, uu = h.chunk(2, dim=-1)
                return Fn.silu(gg) * uu

            try_bench("w13_fprop", w13_fprop, f13)
            fp8_bench("w13_fprop", f13)
            try_bench("w2_fprop", lambda: torch._grouped_mm(h2, w2t, offs=offs), f2)
            fp8_bench("w2_fprop", f2)
            if decode:
                continue
            try_bench("w13_fprop_noh1", w13_fprop, f13)
            try_bench("w13_dgrad", lambda: torch._grouped_mm(h1, w13, offs=offs), f13)
            fp8_bench("w13_dgrad", f13)
            try_bench("w2_dgrad", lambda: torch._grouped_mm(h3, w2, offs=offs), f2)
            fp8_bench("w2_dgrad", f2)
            try_bench("w13_wgrad", lambda: torch._grouped_mm(h1.t(), x, offs=offs), f13)
            fp8_bench("w13_wgrad", f13)
            try_bench("w2_wgrad", lambda: torch._grouped_mm(h3.t(), h2, offs=offs), f2)
            fp8_bench("w2_wgrad", f2)
            del x, w13, w2, h1, h2, h3, tensors
            torch.cuda.empty_cache()
    if out:
        out.close()
    if args.fp8:
        if fp8_out:
            fp8_out.close()

        def gmean(pairs):
            v = [a / b for a, b in pairs if a == a and b == b and a > 0 and b > 0]
            return (f"{math.exp(sum(math.log(r) for r in v) / len(v)):.2f} ({len(v)} rows)") if v else "-"

        na = sum(1 for r in fp8_rows if r[0] != r[0])
        print(f"\nfp8 peer: {len(fp8_rows)} rows, {na} with fp8 grouped n/a; FP8 check "
              f"{'PASS' if check_ok else 'FAIL'}")
        print("fp8 peer geomean: fp8 grouped TFLOP/s / fp8 dense "
              f"{gmean([(r[1], r[0]) for r in fp8_rows])}, fp8 dense / bf16 dense "
              f"{gmean([(r[2], r[1]) for r in fp8_rows])}, fp8 grouped / bf16 grouped (torch._grouped_mm) "
              f"{gmean([(r[3], r[0]) for r in fp8_rows])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
