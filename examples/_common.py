"""Shared setup of the torchrun examples: process group, a small routed problem, a reference check."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

T, D, FF, K, E_LOCAL = 16, 256, 256, 2, 4


def init():
    """torchrun's environment -> (rank, world size, device); one GPU per rank."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    return rank, world, device


def routed_problem(rank, world, device, *, seed=17):
    """x, ids, scores of this rank; routes (global_token*K + k) % E cross every rank; scores 1/K."""
    E = E_LOCAL * world
    g = torch.Generator().manual_seed(seed + rank)
    x = torch.randn(T, D, generator=g).to(torch.bfloat16).to(device)
    tok = torch.arange(rank * T, (rank + 1) * T).unsqueeze(1)
    ids = ((tok * K + torch.arange(K)) % E).to(torch.int32).to(device)
    scores = torch.full((T, K), 1.0 / K, device=device)
    return x, ids, scores


def expert_weights(world, device, *, seed=2027):
    """Global W13 [E, 2F, D] and W2 [E, D, F] (identical on every rank)."""
    E = E_LOCAL * world
    g = torch.Generator().manual_seed(seed)
    w13 = (torch.randn(E, 2 * FF, D, generator=g) * D**-0.5).to(torch.bfloat16).to(device)
    w2 = (torch.randn(E, D, FF, generator=g) * FF**-0.5).to(torch.bfloat16).to(device)
    return w13, w2


def local_slice(w, rank):
    return w[rank * E_LOCAL:(rank + 1) * E_LOCAL]


def reference_local(x, ids, scores, w13, w2, *, activation="swiglu", alpha=1.702, limit=7.0, rmsnorm_eps=None):
    """Single-GPU reference of this rank's tokens with the global weights (dense loop over experts)."""
    rows = x.repeat_interleave(K, dim=0)
    flat = ids.reshape(-1).long()
    h3 = torch.zeros_like(rows)
    for e in range(w13.shape[0]):
        sel = (flat == e).nonzero().squeeze(1)
        if sel.numel():
            g, u = F.linear(rows[sel], w13[e]).float().chunk(2, dim=-1)
            if activation == "swiglu_clamped":
                g, u = g.clamp(max=limit), u.clamp(-limit, limit)
                h2 = g * torch.sigmoid(alpha * g) * (u + 1)
            else:
                h2 = g * torch.sigmoid(g) * u
            h3[sel] = F.linear(h2.to(torch.bfloat16), w2[e])
    h3 = h3.view(-1, K, x.shape[1]).float()
    if rmsnorm_eps is not None:
        h3 = F.rms_norm(h3, (x.shape[1],), eps=rmsnorm_eps)
    return (h3 * scores.float().unsqueeze(-1)).sum(1).to(torch.bfloat16)


def rel_l2(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12)).item()
