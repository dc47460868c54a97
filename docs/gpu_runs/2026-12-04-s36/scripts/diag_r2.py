"""s36 r2 diagnostics of r1's two emulated-torch failures, each setting in its own process.

  python diag_r2.py fault WORLD RANK   -- upstream's fake-PG context (T=128, D=F=128, K=2, E=4*WORLD, two
                                          layers per slot): a BF16 no-grad forward; prints ok or the error
  python diag_r2.py overflow WORLD RANK -- (s36 r4) the same context with every route to this rank's first
                                          expert: R copies of 2T routes overflow its T*K rows; prints the error
  python diag_r2.py clamped WORLD RANK -- the MXFP8 clamped-SwiGLU case of two_rank_worker (x*4, alpha 1.5,
                                          limit 5) with the data of rank 1 of 2 and its routes to experts
                                          0-1 disabled, on a context of WORLD ranks (1: one real rank holding
                                          all four experts; 2: emulated rank 1): relL2 vs the BF16 reference
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../../tests/torch"))
import two_rank_worker as w  # noqa: E402
from moe_reference import mxfp8_emulated_moe, reference_moe  # noqa: E402

import dist_moe  # noqa: E402

mode, world, rank = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.cuda.set_device(0)
dev = torch.device("cuda", 0)
dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)


def rel(a, b):
    a, b = a.float().flatten(), b.float().flatten()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


if mode == "overflow":
    cfg = dist_moe.Config(max_num_local_input_tokens=128, hidden_dim=128, intermediate_dim=128, top_k=2,
                          num_experts=4 * world, max_moe_layers_per_activation_slot=2)
    ctx = dist_moe.create_context(group=dist.group.WORLD, config=cfg, device=dev)
    x = torch.randn(128, 128, device=dev, dtype=torch.bfloat16)
    ids = torch.full((128, 2), 4 * rank, device=dev, dtype=torch.int32)
    w13 = torch.randn(4, 256, 128, device=dev, dtype=torch.bfloat16) * 0.1
    w2 = torch.randn(4, 128, 128, device=dev, dtype=torch.bfloat16) * 0.1
    try:
        with torch.no_grad():
            dist_moe.routed_experts(x, ids, torch.rand(128, 2, device=dev), w13, w2, ctx)
        torch.cuda.synchronize()
        print("overflow: no error", flush=True)
    except Exception as e:
        print(f"overflow: {e}", flush=True)
elif mode == "fault":
    for D in (128, 256):
        cfg = dist_moe.Config(max_num_local_input_tokens=128, hidden_dim=D, intermediate_dim=D, top_k=2,
                              num_experts=4 * world, max_moe_layers_per_activation_slot=2)
        ctx = dist_moe.create_context(group=dist.group.WORLD, config=cfg, device=dev)
        x = torch.randn(128, D, device=dev, dtype=torch.bfloat16)
        ids = torch.randint(0, 4 * world, (128, 2), device=dev, dtype=torch.int32)
        scores = torch.rand(128, 2, device=dev)
        w13 = torch.randn(4, 2 * D, D, device=dev, dtype=torch.bfloat16) * 0.1
        w2 = torch.randn(4, D, D, device=dev, dtype=torch.bfloat16) * 0.1
        try:
            with torch.no_grad():
                out = dist_moe.routed_experts(x, ids, scores, w13, w2, ctx)
            torch.cuda.synchronize()
            print(f"fault world={world} rank={rank} D={D}: ok {out.float().abs().sum().item():.3f}", flush=True)
        except Exception as e:
            print(f"fault world={world} rank={rank} D={D}: ERROR {e}", flush=True)
            raise
        ctx.close()
else:
    h = w.Harness(1, 2, dev)  # rank 1 of 2's data; experts 2-3 are rank 1's
    x = h.xs[1] * 4
    ids = h.ids[1]
    ids = torch.where((ids >= 0) & (ids // 2 != 1), torch.full_like(ids, -1), ids)
    s, g = h.scores[1], h.grads[1]
    mx = dist_moe.BlockScaledConfig(format=dist_moe.BlockScaledFormat.MXFP8_E4M3, pipeline="staged")
    cfg = h.config(block_scaled=mx, activation="swiglu_clamped", swiglu_alpha=1.5, swiglu_limit=5.0,
                   num_experts=4 if world == 1 else 4 * world // 2)
    ctx = dist_moe.create_context(group=dist.group.WORLD, config=cfg, device=dev)
    experts = slice(0, 4) if world == 1 else slice(2, 4)
    w13 = h.w13_global[experts].clone().requires_grad_()
    w2 = h.w2_global[experts].clone().requires_grad_()
    p13, p2 = (dist_moe.prepare_block_scaled_weight(t, mx) for t in (w13, w2))
    xl, sl = x.clone().requires_grad_(), s.clone().requires_grad_()
    out = dist_moe.routed_experts(xl, h.ids[1] if world > 1 else ids, sl, p13, p2, ctx)
    out.backward(g)
    xr, sr = x.clone().requires_grad_(), s.clone().requires_grad_()
    r13, r2 = h.w13_global.clone().requires_grad_(), h.w2_global.clone().requires_grad_()
    ref = reference_moe(xr, ids, sr, r13, r2, activation="swiglu_clamped", alpha=1.5, limit=5.0)
    ref.backward(g)
    scale = 1 if world == 1 else world  # emulated: every routed row counted R times in WGRAD
    print(f"clamped world={world} rank={rank}: relL2 out {rel(out, ref):.4f} grad_x {rel(xl.grad, xr.grad):.4f} "
          f"grad_scores {rel(sl.grad, sr.grad):.4f} "
          f"dw13 {rel(w13.grad / scale, r13.grad[2:4] if world > 1 else r13.grad):.4f}", flush=True)
    if world == 1:  # the recipe itself (torch model of the MXFP8 quantization points) on the same data
        m_out, m_gx, m_gs = mxfp8_emulated_moe(x, ids, s, g, p13, p2, activation="swiglu_clamped", alpha=1.5,
                                               limit=5.0)
        print(f"clamped recipe model vs bf16: relL2 out {rel(m_out, ref):.4f} grad_x {rel(m_gx, xr.grad):.4f} "
              f"grad_scores {rel(m_gs, sr.grad):.4f}; layer vs model: out {rel(out, m_out):.2e} "
              f"grad_x {rel(xl.grad, m_gx):.2e} grad_scores {rel(sl.grad, m_gs):.2e}", flush=True)
    ctx.close()
