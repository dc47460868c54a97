"""Shared pieces of the torch test suites: upstream's reference model, case builders, comparisons.

The reference follows upstream's ``_reference_moe``: per expert, ``h1 = x W13ᵀ`` in BF16, SwiGLU in
FP32 cast to BF16, ``h3 = h2 W2ᵀ`` in BF16, optionally RMSNorm per route in FP32, then the
score-weighted FP32 sum over the K routes cast to BF16; -1 routes contribute nothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

FWD_TOL = dict(rtol=2e-2, atol=2e-2, rel_l2=5e-3, cos=0.999)
GRAD_TOL = dict(rtol=3e-2, atol=3e-2, rel_l2=1e-2, cos=0.995)
WGRAD_TOL = dict(rtol=3e-2, atol=1.0, rel_l2=1.5e-2, cos=0.995)


def swiglu(h1: torch.Tensor, activation: str = "swiglu", alpha: float = 1.702, limit: float = 7.0) -> torch.Tensor:
    g, u = h1.float().chunk(2, dim=-1)
    if activation == "swiglu_clamped":
        g = g.clamp(max=limit)
        u = u.clamp(-limit, limit)
        return (g * torch.sigmoid(alpha * g) * (u + 1)).to(h1.dtype)
    return (g * torch.sigmoid(g) * u).to(h1.dtype)


def reference_moe(x, ids, scores, w13, w2, *, activation="swiglu", alpha=1.702, limit=7.0, rmsnorm_eps=None,
                  return_h1=False, postprocess=None, return_routes=False):
    """x [T, D] BF16, ids/scores [T, K], w13 [E, 2F, D] and w2 [E, D, F] over ALL experts."""
    T, K = ids.shape
    D = x.shape[1]
    x_routes = x.repeat_interleave(K, dim=0)
    flat = ids.reshape(-1)
    h3 = x.new_zeros((T * K, D))
    h1_rows = []
    for e in range(w13.shape[0]):
        rows = (flat == e).nonzero().squeeze(1)
        if rows.numel() == 0:
            continue
        h1 = F.linear(x_routes[rows], w13[e])
        h1_rows.append(h1)
        h3 = h3.index_put((rows,), F.linear(swiglu(h1, activation, alpha, limit), w2[e]))
    h3 = h3.view(T, K, D)
    if return_routes:  # the BF16 route rows h3 [T, K, D] (-1 routes zero), before any postprocess
        return h3
    routes = F.rms_norm(h3.float(), (D,), eps=rmsnorm_eps) if rmsnorm_eps is not None else h3.float()
    if postprocess is not None:  # the caller's callable on the BF16 route rows (-1 rows are zero here)
        routes = postprocess(h3).float()
    out = (routes * scores.float().unsqueeze(-1)).sum(dim=1).to(x.dtype)
    return (out, torch.cat(h1_rows)) if return_h1 else out


def assert_moe_close(actual, expected, *, rtol, atol, rel_l2, cos, name="tensor"):
    a, e = actual.detach().float(), expected.detach().float()
    torch.testing.assert_close(a, e, rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")
    a, e = a.flatten(), e.flatten()
    if e.norm() == 0:
        assert a.abs().max() == 0, f"{name}: expected exact zeros"
        return
    rel = ((a - e).norm() / e.norm().clamp_min(1e-12)).item()
    c = F.cosine_similarity(a, e, dim=0).item()
    assert rel < rel_l2, f"{name}: relative L2 {rel:.3e} >= {rel_l2}"
    assert c > cos, f"{name}: cosine {c:.6f} <= {cos}"


def make_weights(E, D, F_, *, seed, device):
    g = torch.Generator(device="cpu").manual_seed(seed)
    w13 = (torch.randn(E, 2 * F_, D, generator=g) * D**-0.5).to(torch.bfloat16).to(device)
    w2 = (torch.randn(E, D, F_, generator=g) * F_**-0.5).to(torch.bfloat16).to(device)
    return w13, w2


def make_tokens(T, D, K, *, seed, device, ids=None, E=None):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(T, D, generator=g).to(torch.bfloat16).to(device)
    raw = torch.rand(T, K, generator=g) + 0.1
    scores = (raw / raw.sum(-1, keepdim=True)).to(device)
    if ids is None:
        ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)])
    ids = ids.to(torch.int32).to(device)
    scores = torch.where(ids >= 0, scores, torch.zeros_like(scores))
    return x, ids, scores


def upstream_case_ids(T, K, E, *, shift=0):
    """Upstream's deterministic single-rank routes: (t*K + k + shift) % E."""
    t = torch.arange(T).unsqueeze(1)
    k = torch.arange(K).unsqueeze(0)
    return (t * K + k + shift) % E


def assert_train_close(got, want):
    """(out, grad_x, grad_scores, grad_w13, grad_w2) against the reference with upstream's tolerances;
    each result is compared in the reference's shape (the layer returns the logical weight shapes)."""
    names = ("out", "grad_x", "grad_scores", "grad_w13", "grad_w2")
    for name, g, w, tol in zip(names, got, want, (FWD_TOL, GRAD_TOL, GRAD_TOL, WGRAD_TOL, WGRAD_TOL)):
        assert g is not None, f"{name} is missing"
        assert_moe_close(g.reshape(w.shape), w, name=name, **tol)


def assert_planner_reset(ctx):
    """The context's activation planner holds nothing: every backward popped its forward (upstream's
    _assert_planner_reset: offsets at their initial values, saved bytes and layer ids zero)."""
    snap = ctx.planner_snapshot()
    assert all(v == 0 for v in snap["saved_bytes"]), snap
    assert all(v == 0 for v in snap["layer_ids"]), snap
    ab = ctx.activation_buffer
    assert ab.buffer_offsets.tolist() == ab.initial_buffer_offsets.tolist()
    assert not ab.saved_activation_bytes_per_rank.any() and not ab.moe_layer_id.any()
