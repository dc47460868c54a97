"""Run: torchrun --standalone --nproc-per-node=2 examples/bf16_inference.py

BF16 inference on every local GPU: an inference context (no activation slots), an eager call, then
a CUDA graph captured once and replayed on new tokens and routes (the last token padded with -1
routes), each checked against a single-GPU reference; prints eager vs graph latency.
"""

import torch
import torch.distributed as dist
from _common import D, E_LOCAL, FF, K, T, expert_weights, init, local_slice, reference_local, rel_l2, routed_problem

import dist_moe


def main():
    rank, world, device = init()
    config = dist_moe.Config(
        max_num_local_input_tokens=T, hidden_dim=D, intermediate_dim=FF, top_k=K, num_experts=E_LOCAL * world,
        max_moe_layers_per_activation_slot=1, num_activation_slots=0, inference=True,
    )
    ctx = dist_moe.create_context(group=dist.group.WORLD, config=config, device=device)
    w13_all, w2_all = expert_weights(world, device)
    w13, w2 = local_slice(w13_all, rank).contiguous(), local_slice(w2_all, rank).contiguous()
    x, ids, scores = routed_problem(rank, world, device)

    with torch.inference_mode():
        out = dist_moe.routed_experts(x, ids, scores, w13, w2, ctx)
        err = rel_l2(out, reference_local(x, ids, scores, w13_all, w2_all))
        assert err < 5e-3, f"rank {rank}: eager relative L2 {err:.2e}"

        static = [x.clone(), ids.clone(), scores.clone()]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = dist_moe.routed_experts(*static, w13, w2, ctx)
        for seed in (5, 6):
            nx, nids, ns = routed_problem(rank, world, device, seed=seed)
            nids = torch.roll(nids, shifts=seed, dims=0)
            nids[-1] = -1  # a padded token: exact zero output
            ns[-1] = 0
            for dst, src in zip(static, (nx, nids, ns)):
                dst.copy_(src)
            graph.replay()
            err = rel_l2(static_out, reference_local(nx, nids, ns, w13_all, w2_all))
            assert err < 5e-3 and static_out[-1].abs().max() == 0, f"rank {rank}: replay relative L2 {err:.2e}"

        def timed(fn, iters=50):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            fn()
            dist.barrier()
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e3 / iters

        eager_us = timed(lambda: dist_moe.routed_experts(*static, w13, w2, ctx))
        graph_us = timed(graph.replay)
    print(f"[rank {rank}] T={T} D={D} F={FF} K={K} E={E_LOCAL * world}: eager {eager_us:.1f} us/call, "
          f"CUDA graph {graph_us:.1f} us/call", flush=True)
    ctx.close()
    dist.destroy_process_group()
    if rank == 0:
        print("bf16_inference: OK (eager and graph replays match the reference)")


if __name__ == "__main__":
    main()
