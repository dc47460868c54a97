"""Run: torchrun --standalone --nproc-per-node=2 examples/block_scaled_inference.py

Block-scaled inference on every local GPU with prepared weights: MXFP8 (E4M3 data, E8M0 scales per
32 values), then NVFP4 (packed E2M1 data, E4M3 scales per 16 values, an FP32 global scale per
expert), each on an inference context of its own that is closed before the next one is created
(the process group stays). The BF16 expert weights are quantized once with
prepare_block_scaled_weight; each format's output is checked against a single-GPU BF16 reference
within upstream's forward tolerance (relative L2 below 0.075 for MXFP8, 0.29 for NVFP4), and the
last token, whose routes are all -1, must come out exactly zero. On Hopper, MXFP8 inference
contexts read MXFP8 training preparations (inference=False: 32x32 weight tiles, the GEMM's
operand); NVFP4 has one preparation. Works with any number of ranks, one included
(--nproc-per-node=1).
"""

import torch
import torch.distributed as dist
from _common import D, E_LOCAL, FF, K, T, expert_weights, init, local_slice, reference_local, rel_l2, routed_problem

import dist_moe

# (format, prepare with inference=..., upstream's relative L2 bound against the BF16 reference)
FORMATS = (
    (dist_moe.BlockScaledFormat.MXFP8_E4M3, False, 0.075),
    (dist_moe.BlockScaledFormat.NVFP4, True, 0.29),
)


def main():
    rank, world, device = init()
    w13_all, w2_all = expert_weights(world, device)
    w13, w2 = local_slice(w13_all, rank).contiguous(), local_slice(w2_all, rank).contiguous()
    x, ids, scores = routed_problem(rank, world, device)
    ids[-1] = -1  # a padded token: exact zero output
    scores[-1] = 0
    want = reference_local(x, ids, scores, w13_all, w2_all)

    for fmt, inference_preparation, bound in FORMATS:
        block_scaled = dist_moe.BlockScaledConfig(format=fmt, pipeline="staged")
        config = dist_moe.Config(
            max_num_local_input_tokens=T, hidden_dim=D, intermediate_dim=FF, top_k=K, num_experts=E_LOCAL * world,
            max_moe_layers_per_activation_slot=1, num_activation_slots=0, inference=True, block_scaled=block_scaled,
        )
        ctx = dist_moe.create_context(group=dist.group.WORLD, config=config, device=device)
        with torch.no_grad():
            pw13 = dist_moe.prepare_block_scaled_weight(w13, block_scaled, inference=inference_preparation)
            pw2 = dist_moe.prepare_block_scaled_weight(w2, block_scaled, inference=inference_preparation)
            out = dist_moe.routed_experts(x, ids, scores, pw13, pw2, ctx)
        err = rel_l2(out, want)
        assert err < bound, f"rank {rank}: {fmt} output relative L2 {err:.3e} vs the BF16 reference (bound {bound})"
        assert out[-1].abs().max() == 0, f"rank {rank}: {fmt}: the padded token's output is not zero"
        print(f"[rank {rank}] {fmt}: relative L2 {err:.3e} vs the BF16 reference (bound {bound})", flush=True)
        ctx.close()  # collective; the process group stays for the next context
    dist.destroy_process_group()
    if rank == 0:
        print("block_scaled_inference: OK (MXFP8 and NVFP4 inference with prepared weights within upstream's "
              "tolerance of the BF16 reference, padded token exactly zero)")


if __name__ == "__main__":
    main()
