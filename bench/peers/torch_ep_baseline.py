"""(Copied unchanged from the team baseline shared/baselines/torch_ep_baseline.py so it travels to the GPU machine.)

Anchor measurements on the lent H200s, with stock PyTorch only.

What a user would pick instead of dist_moe: NCCL all_to_all + torch._grouped_mm
(the torchtitan-style expert-parallel layer). Prints one table; run with
  python3 torch_ep_baseline.py            (spawns one process per visible GPU)
"""
import os, sys, time, json
import torch
import torch.distributed as dist
import torch.nn.functional as Fn
from torch.distributed.nn.functional import all_to_all_single as a2a_autograd

SHAPES = {  # name: (T tokens/rank, D, F, E global, K)
    "dsv3_prefill": (4096, 7168, 2048, 256, 8),
    "qwen3_30b":    (8192, 2048, 768, 128, 8),
    "mixtral":      (4096, 4096, 14336, 8, 2),
    "dsv3_decode":  (128, 7168, 2048, 256, 8),
}

def bench(fn, iters=20, warm=5):
    for _ in range(warm): fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    ts = []
    for _ in range(iters):
        s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    ts.sort(); return ts[len(ts) // 2]

def dense_ceiling():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
    ms = bench(lambda: a @ b, 10, 3)
    return 2 * 8192**3 / ms / 1e9

def grouped_gemm_rate(T, D, F, E_local, K, R):
    rows = T * K  # balanced: each rank receives T*K rows over its local experts
    per = rows // E_local
    offs = torch.arange(1, E_local + 1, device="cuda", dtype=torch.int32) * per
    x = torch.randn(per * E_local, D, device="cuda", dtype=torch.bfloat16)
    w13 = torch.randn(E_local, D, 2 * F, device="cuda", dtype=torch.bfloat16) * 0.02
    w2 = torch.randn(E_local, F, D, device="cuda", dtype=torch.bfloat16) * 0.02
    def fwd():
        h = torch._grouped_mm(x, w13, offs=offs)
        g, u = h.chunk(2, dim=-1)
        return torch._grouped_mm(Fn.silu(g) * u, w2, offs=offs)
    ms13 = bench(lambda: torch._grouped_mm(x, w13, offs=offs))
    ms = bench(fwd)
    flops13 = 2 * per * E_local * D * 2 * F
    flops = flops13 + 2 * per * E_local * F * D
    return flops13 / ms13 / 1e9, flops / ms / 1e9

class TorchEP(torch.autograd.Function):
    pass

def ep_layer(x, ids, scores, w13, w2, E, R, rank):
    """torchtitan-style EP forward: sort routes by expert, a2a with host splits, grouped mm, a2a back."""
    T, D = x.shape; K = ids.shape[1]; E_local = E // R
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    routed = x[order // K]
    counts = torch.bincount(flat, minlength=E)                      # per global expert
    send_rank = counts.view(R, E_local).sum(1)
    recv_counts = torch.empty_like(counts); dist.all_to_all_single(recv_counts, counts)
    recv_rank = recv_counts.view(R, E_local).sum(1)
    ss, rs = send_rank.tolist(), recv_rank.tolist()                  # host sync (the usual way)
    recv = a2a_autograd(routed.new_empty(sum(rs), D), routed, rs, ss)
    # regroup received rows (rank-major, expert-minor) to expert-major
    rc = recv_counts.view(R, E_local)
    src_expert = torch.repeat_interleave(torch.arange(E_local, device=x.device).repeat(R), rc.reshape(-1))
    perm = torch.argsort(src_expert, stable=True)
    xe = recv[perm]
    offs = torch.cumsum(rc.sum(0), 0).to(torch.int32)
    h = torch._grouped_mm(xe, w13, offs=offs)
    g, u = h.chunk(2, dim=-1)
    y = torch._grouped_mm(Fn.silu(g) * u, w2, offs=offs)
    back = y[torch.argsort(perm)]
    out_routed = a2a_autograd(y.new_empty(T * K, D), back, ss, rs)
    unsorted = out_routed[torch.argsort(order)]
    return (unsorted.view(T, K, D).float() * scores.unsqueeze(-1)).sum(1).to(x.dtype)

def worker(rank, R, port, out_q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=R)
    res = {}
    if rank == 0: res["dense_bf16_tflops"] = dense_ceiling()
    # all_to_all_single bandwidth, 256 MiB per rank total
    n = 256 << 20
    a = torch.empty(n // 2, device="cuda", dtype=torch.bfloat16); b = torch.empty_like(a)
    ms = bench(lambda: dist.all_to_all_single(b, a))
    res["nccl_a2a_GBps_per_rank_remote"] = n * (R - 1) / R / ms / 1e6
    for name, (T, D, F, E, K) in SHAPES.items():
        E_local = E // R
        g13, gf = grouped_gemm_rate(T, D, F, E_local, K, R)
        torch.manual_seed(rank)
        x = torch.randn(T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        ids = torch.stack([torch.randperm(E, device="cuda")[:K] for _ in range(T)]) if T <= 512 else \
              torch.argsort(torch.rand(T, E, device="cuda"), dim=1)[:, :K]
        scores = torch.softmax(torch.randn(T, K, device="cuda"), -1).requires_grad_()
        w13 = (torch.randn(E_local, D, 2 * F, device="cuda", dtype=torch.bfloat16) * 0.02).requires_grad_()
        w2 = (torch.randn(E_local, F, D, device="cuda", dtype=torch.bfloat16) * 0.02).requires_grad_()
        fwd_ms = bench(lambda: ep_layer(x, ids, scores, w13, w2, E, R, rank), 10, 3)
        def fb():
            y = ep_layer(x, ids, scores, w13, w2, E, R, rank); y.float().sum().backward()
        fb_ms = bench(fb, 10, 3)
        flops_f = 2 * T * K * (D * 2 * F + F * D)
        res[name] = dict(grouped_w13_tflops=g13, grouped_fwd_tflops=gf, ep_fwd_ms=fwd_ms, ep_fwd_bwd_ms=fb_ms,
                         ep_fwd_tflops=flops_f / fwd_ms / 1e9, ep_fwd_bwd_tflops=3 * flops_f / fb_ms / 1e9)
    out_q.put((rank, res))
    dist.destroy_process_group()

if __name__ == "__main__":
    import torch.multiprocessing as mp
    R = torch.cuda.device_count()
    ctx = mp.get_context("spawn"); q = ctx.Queue()
    ps = [ctx.Process(target=worker, args=(r, R, 29517, q)) for r in range(R)]
    [p.start() for p in ps]
    results = dict(q.get() for _ in range(R)); [p.join() for p in ps]
    print(json.dumps(results, indent=1))
    r0 = results[0]
    print(f"GPUs {R}; dense bf16 {r0['dense_bf16_tflops']:.0f} TFLOP/s; nccl a2a {r0['nccl_a2a_GBps_per_rank_remote']:.0f} GB/s remote per rank")
    print(f"{'shape':14} {'gmm W13 TF':>10} {'gmm fwd TF':>10} {'EP fwd ms':>9} {'EP f+b ms':>9} {'EP fwd TF':>9} {'EP f+b TF':>9}")
    for name in SHAPES:
        m = r0[name]
        print(f"{name:14} {m['grouped_w13_tflops']:10.0f} {m['grouped_fwd_tflops']:10.0f} {m['ep_fwd_ms']:9.3f} {m['ep_fwd_bwd_ms']:9.3f} {m['ep_fwd_tflops']:9.0f} {m['ep_fwd_bwd_tflops']:9.0f}")
