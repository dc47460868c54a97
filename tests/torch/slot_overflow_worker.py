"""A real activation-slot overflow at world size 1, in its own process (the device trap ends the CUDA
context): two training forwards into a one-layer slot with no backward between them. Prints
EXPECTED_SLOT_OVERFLOW first; test_checkpointing.py checks the planner's diagnostic line."""

import os
import tempfile

import torch
import torch.distributed as dist

import dist_moe


def main():
    torch.cuda.set_device(0)
    store = tempfile.NamedTemporaryFile(prefix="dmoe_pg_", delete=False).name
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    T, D, F, E, K = 8, 256, 256, 4, 2
    cfg = dist_moe.Config(max_num_local_input_tokens=T, hidden_dim=D, intermediate_dim=F, top_k=K, num_experts=E,
                          max_moe_layers_per_activation_slot=1)
    ctx = dist_moe.create_context(group=dist.group.WORLD, config=cfg, device=0)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(T, D, generator=g).to(torch.bfloat16).cuda().requires_grad_()
    ids = (torch.arange(T * K).view(T, K) % E).to(torch.int32).cuda()
    scores = torch.full((T, K), 0.5, device="cuda")
    w13 = (torch.randn(E, 2 * F, D, generator=g) * D**-0.5).to(torch.bfloat16).cuda()
    w2 = (torch.randn(E, D, F, generator=g) * F**-0.5).to(torch.bfloat16).cuda()
    print("EXPECTED_SLOT_OVERFLOW", flush=True)
    a = dist_moe.routed_experts(x, ids, scores, w13, w2, ctx)
    b = dist_moe.routed_experts(x, ids, scores, w13, w2, ctx)  # the slot already holds a's layer
    torch.cuda.synchronize()  # the trap surfaces here
    print(f"UNEXPECTED: no trap ({(a + b).float().sum().item()})", flush=True)
    os.unlink(store)


if __name__ == "__main__":
    main()
