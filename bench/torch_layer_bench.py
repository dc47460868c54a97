"""The PyTorch front end at the reference shapes: ``dist_moe.routed_experts`` against the stock
PyTorch EP layer (bench/peers/torch_ep_baseline.py) in the same processes, same inputs' shapes,
same timing method (median of CUDA-event timed iterations), printed as ratios.

    python bench/torch_layer_bench.py [--shapes qwen3_30b,dsv3_prefill] [--gpus N] [--iters 10]

Forward is timed under no_grad (a training forward that is never backpropagated would keep its
activations); forward+backward as ``out.float().sum().backward()`` like the baseline, each timed
call starting with every leaf's ``.grad`` set to None (a training step after
``zero_grad(set_to_none=True)``: weight gradients are written, not added to the last call's, on
both sides); decode shapes use an inference context. The C++ layer time of the same shape is ``dist-moe bench``'s.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import torch_ep_baseline as base  # noqa: E402

import dist_moe  # noqa: E402


def routes(T, E, K, device):
    if T <= 512:
        return torch.stack([torch.randperm(E, device=device)[:K] for _ in range(T)]).to(torch.int32)
    return torch.argsort(torch.rand(T, E, device=device), dim=1)[:, :K].to(torch.int32)


def time_ours(cfg, x, ids, scores, L, F, device, iters, infer):
    """Our layer's forward (and forward+backward) times; its weights and context are freed on return,
    before the baseline allocates its own."""
    ctx = dist_moe.create_context(group=dist.group.WORLD, config=cfg, device=device)
    D = x.shape[1]
    w13 = torch.randn(L, 2 * F, D, device=device, dtype=torch.bfloat16) * 0.02
    w2 = torch.randn(L, D, F, device=device, dtype=torch.bfloat16) * 0.02
    res = {}
    with torch.no_grad():
        res["ours_fwd"] = base.bench(lambda: dist_moe.routed_experts(x, ids, scores, w13, w2, ctx), iters, 3)
    if not infer:
        xg, sg = x.clone().requires_grad_(), scores.clone().requires_grad_()
        a, b = w13.clone().requires_grad_(), w2.clone().requires_grad_()

        def ours_fb():
            for t in (xg, sg, a, b):
                t.grad = None
            dist_moe.routed_experts(xg, ids, sg, a, b, ctx).float().sum().backward()

        res["ours_fb"] = base.bench(ours_fb, iters, 3)
    ctx.close()
    return res


def run_shape(name, rank, R, device, iters):
    T, D, F, E, K = base.SHAPES[name]
    L = E // R
    infer = T <= 512
    torch.manual_seed(rank)
    # Random top-k routes can send a rank a few rows more than T*K: scratch for 2x balanced (the
    # C++ bench's default), so no call traps on capacity.
    cfg = dist_moe.Config(max_num_local_input_tokens=T, hidden_dim=D, intermediate_dim=F, top_k=K, num_experts=E,
                          max_moe_layers_per_activation_slot=1, inference=infer,
                          device_scratch_capacity_factor=min(2.0, float(R)),
                          num_activation_slots=0 if infer else 1)
    if not infer:
        # A slot that holds any routing, as in `dist-moe bench`: the backward never recomputes (the
        # stock layer keeps every activation too).
        cfg = dataclasses.replace(
            cfg, activation_slot_bytes=dist_moe.plan_memory(cfg, R).maximum_useful_activation_slot_bytes)
    x = torch.randn(T, D, device=device, dtype=torch.bfloat16)
    ids = routes(T, E, K, device)
    scores = torch.softmax(torch.randn(T, K, device=device), -1)
    res = time_ours(cfg, x, ids, scores, L, F, device, iters, infer)
    torch.cuda.empty_cache()

    # The baseline, same process group, its own weight layout ([E_local, D, 2F] for torch._grouped_mm).
    xb = x.clone().requires_grad_(not infer)
    sb = scores.clone().requires_grad_(not infer)
    w13b = (torch.randn(L, D, 2 * F, device=device, dtype=torch.bfloat16) * 0.02).requires_grad_(not infer)
    w2b = (torch.randn(L, F, D, device=device, dtype=torch.bfloat16) * 0.02).requires_grad_(not infer)
    with torch.no_grad():
        res["torch_fwd"] = base.bench(lambda: base.ep_layer(xb, ids.long(), sb, w13b, w2b, E, R, rank), iters, 3)
    if not infer:
        def torch_fb():
            for t in (xb, sb, w13b, w2b):
                t.grad = None
            base.ep_layer(xb, ids.long(), sb, w13b, w2b, E, R, rank).float().sum().backward()

        res["torch_fb"] = base.bench(torch_fb, iters, 3)
    return res


def worker(rank, R, port, shapes, iters, out_q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_NVLS_ENABLE="0",
                      DMOE_COMM_TIMEOUT_MS="20000")
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=R, device_id=device)
    results = {}
    for name in shapes:
        if rank == 0:
            print(f"... {name} on {R} GPU(s)", flush=True)
        results[name] = run_shape(name, rank, R, device, iters)
    out_q.put((rank, results))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="qwen3_30b,dsv3_prefill,mixtral,dsv3_decode")
    ap.add_argument("--gpus", type=int, default=torch.cuda.device_count())
    ap.add_argument("--iters", type=int, default=10)
    a = ap.parse_args()
    shapes = [s for s in a.shapes.split(",") if s]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a.gpus, 29547, shapes, a.iters, q)) for r in range(a.gpus)]
    for p in procs:
        p.start()
    try:  # a rank that died (a device trap) must not leave the parent waiting forever
        results = dict(q.get(timeout=600) for _ in range(a.gpus))
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    print(f"torch front end vs stock PyTorch EP, EP{a.gpus}, median of {a.iters} (rank 0, ms)")
    print(f"{'shape':14} {'ours fwd':>9} {'torch fwd':>9} {'ratio':>6} {'ours f+b':>9} {'torch f+b':>9} {'ratio':>6}")
    for name in shapes:
        m = results[0][name]
        line = f"{name:14} {m['ours_fwd']:9.3f} {m['torch_fwd']:9.3f} {m['torch_fwd'] / m['ours_fwd']:5.2f}x"
        if "ours_fb" in m:
            line += f" {m['ours_fb']:9.3f} {m['torch_fb']:9.3f} {m['torch_fb'] / m['ours_fb']:5.2f}x"
        print(line, flush=True)


if __name__ == "__main__":
    main()
