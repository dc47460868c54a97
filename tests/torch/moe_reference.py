"""Shared pieces of the torch test suites: upstream's reference model, case builders, comparisons.

The reference follows upstream's ``_reference_moe``: per expert, ``h1 = x W13ᵀ`` in BF16, SwiGLU in
FP32 cast to BF16, ``h3 = h2 W2ᵀ`` in BF16, optionally RMSNorm per route in FP32, then the
score-weighted FP32 sum over the K routes cast to BF16; -1 routes contribute nothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import torch.utils._python_dispatch

FWD_TOL = dict(rtol=2e-2, atol=2e-2, rel_l2=5e-3, cos=0.999)
GRAD_TOL = dict(rtol=3e-2, atol=3e-2, rel_l2=1e-2, cos=0.995)
# Weight gradients: upstream's two-rank harness (T = 128, D = F = 1024: sums over many more tokens)
# allows atol 1.0 and relL2 1.5e-2; its single-rank rows hold them to GRAD_TOL like every other grad.
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


def single_rank_config(T, D, F_, K, E, **kw):
    """The suites' one-rank Config: T_max = T, one MoE layer per slot, slot factor 1.0 (inference:
    no slots), then ``kw`` on top."""
    import dist_moe

    base = dict(max_num_local_input_tokens=T, hidden_dim=D, intermediate_dim=F_, top_k=K, num_experts=E,
                max_moe_layers_per_activation_slot=1, activation_slot_capacity_factor=1.0)
    base.update(kw)
    if base.get("inference"):
        base.update(num_activation_slots=0, activation_slot_capacity_factor=None)
    return dist_moe.Config(**base)


def make_case(t, D, F_, E, K, *, seed, device, shift=0, ids=None):
    """x, ids (upstream's cyclic routes unless given), scores, w13, w2 of a seeded case."""
    x, ids, scores = make_tokens(t, D, K, seed=seed, device=device,
                                 ids=upstream_case_ids(t, K, E, shift=shift) if ids is None else ids)
    w13, w2 = make_weights(E, D, F_, seed=seed + 1, device=device)
    return x, ids, scores, w13, w2


def leaves(*tensors):
    """Fresh leaf copies of the tensors; the floating ones require grad."""
    return [t.detach().clone().requires_grad_(t.is_floating_point()) for t in tensors]


def run_reference(x, ids, scores, w13, w2, grad_out, **kw):
    """(out, grad_x, grad_scores, grad_w13, grad_w2) of ``reference_moe`` on leaf copies."""
    x, scores, w13, w2 = leaves(x, scores, w13, w2)
    out = reference_moe(x, ids, scores, w13, w2, **kw)
    out.backward(grad_out)
    return out.detach(), x.grad, scores.grad, w13.grad, w2.grad


def run_train(ctx, x, ids, scores, w13, w2, grad_out, options=None, *, fp32_wgrad=False):
    """One training step of ``dist_moe.routed_experts`` on fresh leaves: (out, grad_x, grad_scores,
    grad_w13, grad_w2). With ``fp32_wgrad`` the weight leaves declare grad_dtype FP32, so autograd
    keeps an FP32 WGRAD as it is (it casts a gradient to the leaf's dtype otherwise)."""
    import dist_moe

    x, scores, w13, w2 = leaves(x, scores, w13, w2)
    if fp32_wgrad:
        w13.grad_dtype = w2.grad_dtype = torch.float32
    out = dist_moe.routed_experts(x, ids, scores, w13, w2, ctx, options=options)
    out.backward(grad_out)
    return out.detach(), x.grad, scores.grad, w13.grad, w2.grad


def upstream_case_ids(T, K, E, *, shift=0):
    """Upstream's deterministic single-rank routes: (t*K + k + shift) % E."""
    t = torch.arange(T).unsqueeze(1)
    k = torch.arange(K).unsqueeze(0)
    return (t * K + k + shift) % E


def assert_train_close(got, want, *, grad_tol=GRAD_TOL, wgrad_tol=WGRAD_TOL):
    """(out, grad_x, grad_scores, grad_w13, grad_w2) against the reference with upstream's tolerances
    (the two-rank harness's by default; single-rank rows pass their own); each result is compared in
    the reference's shape (the layer returns the logical weight shapes)."""
    names = ("out", "grad_x", "grad_scores", "grad_w13", "grad_w2")
    for name, g, w, tol in zip(names, got, want, (FWD_TOL, grad_tol, grad_tol, wgrad_tol, wgrad_tol)):
        assert g is not None, f"{name} is missing"
        assert_moe_close(g.reshape(w.shape), w, name=name, **tol)


class OpCalls(torch.utils._python_dispatch.TorchDispatchMode):
    """Inside ``with OpCalls(op) as calls:`` the arguments of every call of the op overload ``op``
    (forward and backward: autograd carries the mode into the backward) land in ``calls.args``."""

    def __init__(self, op):
        super().__init__()
        self.op, self.args = op, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is self.op:
            self.args.append(args)
        return func(*args, **(kwargs or {}))


def assert_hooks_fired_once_per_backward(fired, p13, p2, step):
    """Upstream's in-place accumulation rule: after backward number `step` (0, 1, ...) of a layer
    whose WGRADs go into p13 / p2's .grad, each parameter's post-accumulate hook has fired once per
    backward -- the first contribution through autograd's AccumulateGrad with the gradient, the later
    ones through AccumulateGrad with none (the accumulate op already added it)."""
    assert len(fired) == 2 * (step + 1), f"after backward {step}: {len(fired)} hook firings, want {2 * (step + 1)}"
    for s in range(step + 1):
        assert {id(p) for p in fired[2 * s:2 * s + 2]} == {id(p13), id(p2)}, f"backward {s}: each hook once"


def assert_planner_reset(ctx):
    """The context's activation planner holds nothing: every backward popped its forward (upstream's
    _assert_planner_reset: offsets at their initial values, saved bytes and layer ids zero)."""
    snap = ctx.planner_snapshot()
    assert all(v == 0 for v in snap["saved_bytes"]), snap
    assert all(v == 0 for v in snap["layer_ids"]), snap
    ab = ctx.activation_buffer
    assert ab.buffer_offsets.tolist() == ab.initial_buffer_offsets.tolist()
    assert not ab.saved_activation_bytes_per_rank.any() and not ab.moe_layer_id.any()


def capture_inference(x, ids, scores, w13, w2, ctx):
    """dist_moe.routed_experts on (x, ids, scores) run once outside a CUDA graph (warm-up), then
    captured into one: (graph, its static inputs [x, ids, scores], its output)."""
    import dist_moe

    static = [x, ids, scores]
    torch.cuda.synchronize()
    dist_moe.routed_experts(x, ids, scores, w13, w2, ctx)  # warm up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = dist_moe.routed_experts(*static, w13, w2, ctx)
    return graph, static, out


# ---- MXFP8 (docs/formats.md "MXFP8 E4M3") ------------------------------------------------------------

# Upstream's block-scaled tolerances, (rtol, atol, relL2 max, cos min) per direction. The layer vs the
# BF16 reference is compared on the aggregate metrics (upstream's single-rank MXFP8 checks); the
# elementwise rtol/atol are kept for reference.
MXFP8_FWD_TOL = dict(rtol=0.05, atol=0.002, rel_l2=0.075, cos=0.9975)
MXFP8_GRAD_TOL = dict(rtol=0.05, atol=0.04, rel_l2=0.075, cos=0.9975)
MXFP8_WGRAD_TOL = dict(rtol=0.05, atol=0.025, rel_l2=0.075, cos=0.9975)


def f32(x64):
    """One FP32 rounding of a float64 result."""
    return x64.to(torch.float32)


def e4m3_satfinite(y32):
    """E4M3 RNE with saturation to ±448 (torch's conversion is RNE but not saturating)."""
    return y32.clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def e8m0_rceil(amax32):
    """MXFP8 scale byte: ceil_pow2(fl(amax · fl(1/448))) + 127 (amax 0 -> byte 0)."""
    inv448 = f32(torch.tensor(1.0, dtype=torch.float64) / 448.0).to(amax32.device)
    prod = f32(amax32.double() * inv448.double())
    mant, exp = torch.frexp(prod)  # prod = mant · 2^exp, mant in [0.5, 1)
    e = torch.where(mant == 0.5, exp - 1, exp)
    byte = torch.where(prod == 0, torch.zeros_like(e), (e + 127).clamp(0, 254))
    return byte.to(torch.uint8)


def e8m0_reciprocal(byte):
    """2^(127 - byte) as FP32, from its bits."""
    return ((254 - byte.to(torch.int32)) << 23).view(torch.float32)


def e8m0_value(byte):
    """2^(byte - 127) as float64, from its bits (exact; 2^-127 for byte 0, a normal float64)."""
    return ((byte.to(torch.int64) + (1023 - 127)) << 52).view(torch.float64)


def e4m3_at_shared_scale(q, shift):
    """E4M3 codes ``q`` (float8_e4m3fn) of blocks whose E8M0 byte lies ``shift`` (int32, broadcast to q)
    below the byte their group shares, re-rounded at it: e4m3_rn(code * 2^-shift); codes of shift 0 are
    kept, shifts past 24 give zeros (docs/formats.md; perf_history G149-G151)."""
    factor = torch.where(shift > 24, torch.zeros_like(shift, dtype=torch.float32), torch.exp2(-shift.float()))
    rerounded = e4m3_satfinite(q.float() * factor).view(torch.uint8)
    return torch.where(shift == 0, q.view(torch.uint8), rerounded).view(torch.float8_e4m3fn)


def mxfp8_rows(t, shared=False):
    """The values of the MXFP8 1x32 row quantization of ``t [..., C]`` (what the layer's FPROP and DGRAD
    A operands hold: E4M3 codes times their E8M0 block scale), float64; a row of zeros stays zero.
    shared: as the training layer quantizes them on Hopper (perf_history G152), once per 128 columns at
    the E8M0 byte of the 128 values' amax -- the largest of their four 32-value blocks' bytes."""
    block = 128 if shared else 32
    shape = t.shape
    blocks = t.float().reshape(-1, shape[-1] // block, block)
    byte = e8m0_rceil(blocks.abs().amax(-1))
    q = e4m3_satfinite(blocks * e8m0_reciprocal(byte)[..., None])
    return (q.float().double() * e8m0_value(byte)[..., None]).reshape(shape)


def dequantize_mxfp8_weight(prepared):
    """A PreparedWeight's FPROP operand as float64 [E, N, K] (its E4M3 codes times the E8M0 scales of
    their 32-wide blocks along K); the DGRAD copy holds the same values transposed."""
    data = prepared.fprop_data
    E, N, K = data.shape
    scale = prepared.fprop_scale.view(torch.uint8).view(E, N, K // 32)
    return (data.float().double().view(E, N, K // 32, 32) * e8m0_value(scale)[..., None]).view(E, N, K)


def _swiglu_f32(h1, activation, alpha, limit):
    g, u = h1.chunk(2, dim=-1)
    if activation == "swiglu_clamped":
        g = g.clamp(max=limit)
        u = u.clamp(-limit, limit)
        return g * torch.sigmoid(alpha * g) * (u + 1)
    return g * torch.sigmoid(g) * u


def mxfp8_emulated_moe(x, ids, scores, grad_out, w13_prepared, w2_prepared, *, activation="swiglu", alpha=1.702,
                       limit=7.0, training=True):
    """The MXFP8 staged layer emulated in torch at upstream's quantization points, for what depends on
    per-row quantization only: (out, grad_x, grad_scores) of one rank's tokens against the prepared
    weights of ALL experts (weights [E, ...]).

    Forward: h1 = rows(x) · W13ᵀ (BF16), h2 = SwiGLU(h1) in FP32 (BF16), h3 = rows(h2) · W2ᵀ (BF16),
    out = Σ_k s·h3 in FP32 (BF16). Backward: grad_h3 = s·g (BF16), grad_h2 = rows(grad_h3) · W2 (BF16),
    dxy = SwiGLU'(h1)·grad_h2 in FP32 (BF16), grad_x = Σ_k rows(dxy) · W13 in FP32 (BF16),
    grad_s = <g, h3>. rows() is the 1x32 MXFP8 row quantization, W the dequantized prepared weights;
    the products are summed in float64. The WGRADs read 32-token column blocks whose grouping follows
    the routing order inside the layer, so they are compared with the BF16 reference only. training: the
    rows quantized once at shared scales per 128 columns, as the training layer's GEMMs read them on
    Hopper (inference layers read the exact 1x32 rows)."""
    T, K = ids.shape
    w13, w2 = dequantize_mxfp8_weight(w13_prepared), dequantize_mxfp8_weight(w2_prepared)
    h3 = torch.zeros(T, K, x.shape[1], dtype=torch.bfloat16, device=x.device)
    gx_routes = torch.zeros(T, K, x.shape[1], dtype=torch.bfloat16, device=x.device)
    xq = mxfp8_rows(x, training)
    for e in range(w13.shape[0]):
        t, k = (ids == e).nonzero(as_tuple=True)
        if t.numel() == 0:
            continue
        h1 = (xq[t] @ w13[e].T).to(torch.bfloat16)
        h1f = h1.float().requires_grad_()
        with torch.enable_grad():
            h2f = _swiglu_f32(h1f, activation, alpha, limit)
        h2 = h2f.detach().to(torch.bfloat16)
        h3[t, k] = (mxfp8_rows(h2, training) @ w2[e].T).to(torch.bfloat16)
        grad_h3 = (scores[t, k].float().unsqueeze(-1) * grad_out[t].float()).to(torch.bfloat16)
        grad_h2 = (mxfp8_rows(grad_h3, training) @ w2[e]).to(torch.bfloat16)
        (dxy,) = torch.autograd.grad(h2f, h1f, grad_h2.float())
        gx_routes[t, k] = (mxfp8_rows(dxy.to(torch.bfloat16), training) @ w13[e]).to(torch.bfloat16)
    out = (h3.float() * scores.float().unsqueeze(-1)).sum(dim=1).to(x.dtype)
    grad_x = gx_routes.float().sum(dim=1).to(x.dtype)
    grad_scores = (h3.float() * grad_out.float().unsqueeze(1)).sum(dim=-1).to(scores.dtype)
    return out, grad_x, grad_scores


def assert_aggregate_close(actual, expected, *, rel_l2, cos, name="tensor", **_elementwise):
    """Upstream's aggregate checks (relative L2 and cosine, FP32); exact zeros where expected is zero."""
    a, e = actual.detach().float().flatten(), expected.detach().float().flatten()
    assert a.shape == e.shape, f"{name}: shape {tuple(actual.shape)} vs {tuple(expected.shape)}"
    if e.norm() == 0:
        assert a.abs().max() == 0, f"{name}: expected exact zeros"
        return
    rel = ((a - e).norm() / e.norm().clamp_min(1e-12)).item()
    c = F.cosine_similarity(a, e, dim=0).item()
    assert rel < rel_l2, f"{name}: relative L2 {rel:.3e} >= {rel_l2}"
    assert c > cos, f"{name}: cosine {c:.6f} <= {cos}"


def assert_mxfp8_train_close(got, want):
    """(out, grad_x, grad_scores, grad_w13, grad_w2) of an MXFP8 layer against the BF16 reference with
    upstream's MXFP8 aggregate tolerances (each result in the reference's shape)."""
    names = ("out", "grad_x", "grad_scores", "grad_w13", "grad_w2")
    tols = (MXFP8_FWD_TOL, MXFP8_GRAD_TOL, MXFP8_GRAD_TOL, MXFP8_WGRAD_TOL, MXFP8_WGRAD_TOL)
    for name, g, w, tol in zip(names, got, want, tols):
        assert g is not None, f"{name} is missing"
        assert_aggregate_close(g.reshape(w.shape), w, name=name, **tol)
