"""Run: torchrun --standalone --nproc-per-node=2 examples/bf16_training.py

Two BF16 MoE layers in a residual chain, trained for two steps on every local GPU: clamped SwiGLU,
the fused post-expert RMSNorm, in-place WGRAD accumulation into the parameters' .grad, SwiGLU clip
statistics, two activation slots (the two-layer microbatch on slot 0, a one-layer microbatch on
slot 1). The first forward is checked against a single-GPU reference.
"""

import torch
import torch.distributed as dist
from _common import D, E_LOCAL, FF, K, T, expert_weights, init, local_slice, reference_local, rel_l2, routed_problem

import dist_moe


def main():
    rank, world, device = init()
    config = dist_moe.Config(
        max_num_local_input_tokens=T, hidden_dim=D, intermediate_dim=FF, top_k=K, num_experts=E_LOCAL * world,
        max_moe_layers_per_activation_slot=2, num_activation_slots=2, activation_slot_capacity_factor=0.0,
        activation="swiglu_clamped",
    )
    ctx = dist_moe.create_context(group=dist.group.WORLD, config=config, device=device)
    layers = []
    for seed in (2027, 2028):
        w13, w2 = expert_weights(world, device, seed=seed)
        layers.append((w13, w2, torch.nn.Parameter(local_slice(w13, rank).clone()),
                       torch.nn.Parameter(local_slice(w2, rank).clone())))
    params = [p for _, _, a, b in layers for p in (a, b)]
    opt = torch.optim.SGD(params, lr=1e-2)
    stats = torch.zeros(3, device=device)
    post = dist_moe.RMSNormPostprocess(eps=1e-6, norm_output_dtype=torch.float32, output_dtype=torch.bfloat16,
                                       require_bitwise=False, recompute_rstd=True)
    opts = dist_moe.ExecutionOptions(inplace_wgrad_accum=True, experts_output_postprocess=post,
                                     swiglu_clip_stats_out_3=stats)
    x, ids, scores = routed_problem(rank, world, device)

    for step in range(2):
        opt.zero_grad(set_to_none=False)  # keep the .grad buffers: later steps accumulate in place
        ctx.select_activation_slot(0, 2)  # microbatch A: two layers on slot 0
        h = x.clone().requires_grad_()
        y = h
        for _, _, p13, p2 in layers:
            y = y + dist_moe.routed_experts(y, ids, scores, p13, p2, ctx, options=opts)
        ctx.select_activation_slot(1, 1)  # microbatch B: one layer on slot 1, live at the same time
        z = dist_moe.routed_experts(x, ids, scores, layers[0][2], layers[0][3], ctx, options=opts)
        loss = y.float().pow(2).mean() + z.float().pow(2).mean()
        loss.backward()
        if step == 0:
            ref = x
            for w13, w2, _, _ in layers:
                ref = ref + reference_local(ref, ids, scores, w13, w2, activation="swiglu_clamped", rmsnorm_eps=1e-6)
            err = rel_l2(y.detach(), ref)
            assert err < 1e-2, f"rank {rank}: two-layer output relative L2 {err:.2e} vs the reference"
        opt.step()
        grad_norm = torch.stack([p.grad.float().norm() for p in params]).norm().item()
        print(f"[rank {rank}] step {step}: loss {loss.item():.5f}, |grad| {grad_norm:.4f}, clip stats (gate>7, "
              f"|up|>7, elements) = {stats.tolist()}", flush=True)
    snapshot = ctx.planner_snapshot()
    assert all(v == 0 for v in snapshot["layer_ids"]), snapshot
    ctx.close()
    dist.destroy_process_group()
    if rank == 0:
        print("bf16_training: OK (output vs reference relative L2 below 1e-2, planner back to its initial state)")


if __name__ == "__main__":
    main()
