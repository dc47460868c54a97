"""Run: torchrun --standalone --nproc-per-node=2 examples/mxfp8_training.py

(append ``--format fp8_blockwise`` for the FP8-blockwise layer). An MXFP8 (E4M3 data, E8M0 scales per 32 values) MoE layer trained for a few steps on every local
GPU with the staged block-scaled pipeline; with ``--format fp8_blockwise`` the same loop in FP8
blockwise (beyond upstream: DeepSeek-V3's recipe, E4M3 data with FP32 scales per 1x128 activation
block and per 128x128 weight block). The BF16 expert weights are parameters; the layer reads
them as prepared MXFP8 training weights (32x32 tiles, plus the transposed copy Hopper's DGRAD
reads), quantized once with prepare_block_scaled_weight and re-quantized into the same storages
(out=) after every optimizer step. WGRAD flows to the prepared weights' BF16 sources and is
accumulated in place into their .grad. The layer learns to imitate a teacher layer; the first
forward is checked against a single-GPU BF16 reference within upstream's MXFP8 tolerance, and a
no-grad evaluation on the same context ends the run (prepared and dynamically quantized weights
give the same bits). Works with any number of ranks, one included (--nproc-per-node=1).
"""

import argparse

import torch
import torch.distributed as dist
from _common import D, E_LOCAL, FF, K, T, expert_weights, init, local_slice, reference_local, rel_l2, routed_problem

import dist_moe

STEPS = 8


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--format", default="mxfp8_e4m3", choices=["mxfp8_e4m3", "fp8_blockwise"])
    fmt = dist_moe.BlockScaledFormat(parser.parse_args().format)
    name = "mxfp8_training" if fmt is dist_moe.BlockScaledFormat.MXFP8_E4M3 else "fp8_blockwise_training"
    rank, world, device = init()
    block_scaled = dist_moe.BlockScaledConfig(format=fmt, pipeline="staged")
    config = dist_moe.Config(
        max_num_local_input_tokens=T, hidden_dim=D, intermediate_dim=FF, top_k=K, num_experts=E_LOCAL * world,
        max_moe_layers_per_activation_slot=1, activation_slot_capacity_factor=1.0, block_scaled=block_scaled,
    )
    ctx = dist_moe.create_context(group=dist.group.WORLD, config=config, device=device)

    w13_global, w2_global = expert_weights(world, device, seed=2027)
    teacher13, teacher2 = expert_weights(world, device, seed=2028)
    p13 = torch.nn.Parameter(local_slice(w13_global, rank).clone())
    p2 = torch.nn.Parameter(local_slice(w2_global, rank).clone())
    opt = torch.optim.Adam([p13, p2], lr=1e-3)
    # Quantized once; the optimizer steps below refill the same storages (every data_ptr kept).
    pw13 = dist_moe.prepare_block_scaled_weight(p13, block_scaled)
    pw2 = dist_moe.prepare_block_scaled_weight(p2, block_scaled)
    opts = dist_moe.ExecutionOptions(inplace_wgrad_accum=True)

    x, ids, scores = routed_problem(rank, world, device)
    target = reference_local(x, ids, scores, teacher13 * 0.5 + w13_global * 0.5, teacher2 * 0.5 + w2_global * 0.5)

    losses = []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=False)  # keep the .grad buffers: from step 1 on WGRAD adds into them
        h = x.clone().requires_grad_()
        y = dist_moe.routed_experts(h, ids, scores, pw13, pw2, ctx, options=opts)
        loss = (y.float() - target.float()).pow(2).mean()
        loss.backward()
        if step == 0:
            err = rel_l2(y.detach(), reference_local(x, ids, scores, w13_global, w2_global))
            assert err < 0.075, f"rank {rank}: {fmt} output relative L2 {err:.3e} vs the BF16 reference"
        opt.step()
        with torch.no_grad():  # re-quantize the updated parameters into the prepared storages
            pw13 = dist_moe.prepare_block_scaled_weight(p13, block_scaled, out=pw13)
            pw2 = dist_moe.prepare_block_scaled_weight(p2, block_scaled, out=pw2)
        losses.append(loss.item())
        grad_norm = torch.stack([p13.grad.float().norm(), p2.grad.float().norm()]).norm().item()
        print(f"[rank {rank}] step {step}: loss {losses[-1]:.6f}, |grad| {grad_norm:.4f}", flush=True)

    with torch.no_grad():  # evaluation on the training context: scratch only, the slots untouched
        y_prepared = dist_moe.routed_experts(x, ids, scores, pw13, pw2, ctx)
        y_dynamic = dist_moe.routed_experts(x, ids, scores, p13, p2, ctx)  # quantized in the call
        eval_loss = (y_prepared.float() - target.float()).pow(2).mean().item()
    assert torch.equal(y_prepared, y_dynamic), f"rank {rank}: prepared and dynamic {fmt} weights differ"
    assert eval_loss < losses[0], f"rank {rank}: loss did not decrease ({losses[0]:.6f} -> {eval_loss:.6f})"
    print(f"[rank {rank}] evaluation after {STEPS} steps: loss {eval_loss:.6f}", flush=True)
    snapshot = ctx.planner_snapshot()
    assert all(v == 0 for v in snapshot["layer_ids"]), snapshot
    ctx.close()
    dist.destroy_process_group()
    if rank == 0:
        print(f"{name}: OK (first output within MXFP8 tolerance of the BF16 reference, loss decreased, "
              "prepared == dynamic weights, planner back to its initial state)")


if __name__ == "__main__":
    main()
