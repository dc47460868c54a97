"""One-rank GPU tests of the NVFP4 inference layer's PyTorch face (upstream's NVFP4 rows at world
size 1): inference contexts with prepared NVFP4 weights through ``block_scaled_forward`` (the
packed E2M1 data, the E4M3 scales per 16 values and the FP32 inverse global scale of each expert,
five operands per weight), CUDA graphs, make_fx and the validation texts.

Numerics: the layer against the BF16 reference (moe_reference.reference_moe) with upstream's NVFP4
forward tolerance, compared on the aggregate metrics as upstream's single-rank block-scaled checks
and the other format suites here do (relative L2 below 0.29, cosine above 0.955; the elementwise
rtol 0.05 / atol 0.007 of upstream's table are kept for reference). A torch emulation of the
quantization points (x and h2 per token, W13 and W2 per expert, E2M1 codes, E4M3 scales per 16
values) measured relative L2 0.19-0.24 on these cases. The C++ suite
(dist_moe_nvfp4_pipeline_tests) holds the layer to the CPU oracle's NVFP4 forward; every other
comparison here is bitwise.
"""

import pytest
import torch
from moe_reference import (
    assert_aggregate_close,
    capture_inference,
    make_case,
    make_tokens,
    make_weights,
    reference_moe,
    single_rank_config,
    upstream_case_ids,
)

import dist_moe

T, D, FF, E, K = 128, 512, 256, 4, 2  # NVFP4 dims: multiples of 256 (D <= 16384, F <= 8192)
DEV = torch.device("cuda", 0)
NVFP4 = dist_moe.BlockScaledConfig(format=dist_moe.BlockScaledFormat.NVFP4, pipeline="staged")
MXFP8 = dist_moe.BlockScaledConfig(format=dist_moe.BlockScaledFormat.MXFP8_E4M3, pipeline="staged")
# Upstream's _blockscaled_tolerance(NVFP4, fwd): (rtol, atol, relL2 max, cos min); the aggregate pair
# is what assert_aggregate_close applies.
NVFP4_FWD_TOL = dict(rtol=0.05, atol=0.007, rel_l2=0.29, cos=0.955)
CLAMPED = dict(activation="swiglu_clamped", swiglu_alpha=1.5, swiglu_limit=5.0)
CLAMPED_REF = dict(activation="swiglu_clamped", alpha=1.5, limit=5.0)
ACTIVATIONS = {"swiglu": ({}, {}), "swiglu_clamped": (CLAMPED, CLAMPED_REF)}
NEEDS_PREPARED = r"block-scaled \(nvfp4\) contexts need prepared weights"


def config(**kw):
    return single_rank_config(T, D, FF, K, E, **{"block_scaled": NVFP4, "inference": True, **kw})


@pytest.fixture
def make_ctx(contexts):
    return lambda **kw: contexts(config(**kw))


def case(seed, shift=0, t=T, ids=None):
    return make_case(t, D, FF, E, K, seed=seed, device=DEV, shift=shift, ids=ids)


def prepare(w13, w2, cfg=NVFP4, **kw):
    return dist_moe.prepare_block_scaled_weight(w13, cfg, **kw), dist_moe.prepare_block_scaled_weight(w2, cfg, **kw)


def rel_l2(a, b) -> float:
    a, b = a.detach().float(), b.detach().float()
    return ((a - b).norm() / b.norm().clamp_min(1e-12)).item()


def forward_op_args(ctx, x, ids, scores, ops13, ops2, *, validate=False):
    """The arguments of a direct ``block_scaled_forward`` call (no RMSNorm, nothing saved)."""
    from dist_moe._routed import _NO_RMSNORM

    return (x, ids, scores, *ops13, *ops2, *_NO_RMSNORM, False, *ctx.selected_activation_slot, validate,
            ctx.context_id)


def operands(p):
    """A PreparedWeight's five layer operands, in the ops' order."""
    return p.fprop_data, p.fprop_scale, p.dgrad_data, p.dgrad_scale, p.global_scale_inv


# ---- ops and contexts -----------------------------------------------------------------------------------------


def test_block_scaled_schemas_carry_each_weights_global_scale_inv():
    """The block-scaled ops take five prepared operands per weight, the fifth the optional FP32
    inverse global scale (NVFP4; None for MXFP8 and FP8 blockwise): block_scaled_forward has 27
    arguments with save_for_backward at 22; the backward ops carry the same ten operands."""
    fwd = torch.ops.dist_moe.block_scaled_forward.default._schema
    names = [a.name for a in fwd.arguments]
    per_weight = ["fprop_data", "fprop_scale", "dgrad_data", "dgrad_scale", "global_scale_inv"]
    ten = [f"{w}_{f}" for w in ("w13", "w2") for f in per_weight]
    assert len(names) == 27 and names[-2:] == ["validate_expert_ids", "context_id"], names
    assert names[3:13] == ten, names
    assert names[22:25] == ["save_for_backward", "activation_slot", "num_moe_layers_in_slot"], names
    text = str(fwd)
    for w in ("w13", "w2"):
        assert f"Tensor? {w}_global_scale_inv" in text and f"Tensor? {w}_dgrad_data" in text, text
        assert f"Tensor {w}_fprop_data" in text, text
    for op in (torch.ops.dist_moe.block_scaled_backward, torch.ops.dist_moe.block_scaled_backward_accumulate_):
        schema = op.default._schema
        names = [a.name for a in schema.arguments]
        start = names.index("w13_fprop_data")
        assert names[start:start + 10] == ten, names
        text = str(schema)
        for w in ("w13", "w2"):  # the backward needs DGRAD operands; the global scales stay optional
            assert f"Tensor? {w}_global_scale_inv" in text and f"Tensor {w}_dgrad_data" in text, text


def test_nvfp4_inference_context_uses_plan_memory(world1):
    """An NVFP4 inference context is created with plan_memory's plan."""
    cfg = config()
    ctx = dist_moe.create_context(group=world1, config=cfg, device=DEV)
    try:
        assert ctx.memory_plan == dist_moe.plan_memory(cfg, 1)
    finally:
        ctx.close()


# ---- numerics -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_nvfp4_inference_matches_bf16_reference(make_ctx, activation):
    """Prepared NVFP4 weights on an inference context: the output within upstream's NVFP4 forward
    tolerance of the BF16 reference, no autograd state (the sources require grad: inference reads
    only the operands), and a second call bitwise equal. Clamped SwiGLU (alpha 1.5, limit 5.0) runs
    on x * 4, which pushes h1 past the limit on both halves."""
    cfg_kw, ref_kw = ACTIVATIONS[activation]
    ctx = make_ctx(**cfg_kw)
    x, ids, scores, w13, w2 = case(seed=29)
    if activation == "swiglu_clamped":
        x = (x * 4).to(torch.bfloat16)
        _, h1 = reference_moe(x, ids, scores, w13, w2, return_h1=True, **ref_kw)
        gate, up = h1.float().chunk(2, dim=-1)
        assert (gate > 5.0).any() and (up.abs() > 5.0).any(), "x * 4 should push h1 past the clamp limit"
    a, b = (w.detach().clone().requires_grad_() for w in (w13, w2))
    p13, p2 = prepare(a, b)
    assert p13.global_scale_inv is not None and p13.dgrad_data is None
    out = dist_moe.routed_experts(x, ids, scores, p13, p2, ctx)
    assert out.grad_fn is None and out.shape == (T, D) and out.dtype == torch.bfloat16
    want = reference_moe(x, ids, scores, w13, w2, **ref_kw)
    print(f"{activation}: NVFP4 vs BF16 relative L2 {rel_l2(out, want):.4f}")
    assert_aggregate_close(out, want, name=f"{activation} out", **NVFP4_FWD_TOL)
    torch.testing.assert_close(dist_moe.routed_experts(x, ids, scores, p13, p2, ctx), out, rtol=0, atol=0)


def test_nvfp4_padding_routes_give_exact_zeros(make_ctx):
    """ids[0] and ids[-1] all -1, ids[1, 1] = -1 (scores 0 there), validate_expert_ids: rows 0 and -1
    exactly zero, the rest within tolerance of the reference; a call whose every route is -1 gives
    exact zeros everywhere; bounded T (8 of 128) on the same context matches the reference."""
    ctx = make_ctx()
    ids = upstream_case_ids(T, K, E)
    ids[0] = -1
    ids[-1] = -1
    ids[1, 1] = -1
    x, ids, scores, w13, w2 = case(seed=11, ids=ids)
    p13, p2 = prepare(w13, w2)
    opts = dist_moe.ExecutionOptions(validate_expert_ids=True)
    out = dist_moe.routed_experts(x, ids, scores, p13, p2, ctx, options=opts)
    assert out[0].abs().max() == 0 and out[-1].abs().max() == 0
    assert_aggregate_close(out, reference_moe(x, ids, scores, w13, w2), name="padded out", **NVFP4_FWD_TOL)

    none = torch.full_like(ids, -1)
    zero_scores = torch.zeros_like(scores)
    out = dist_moe.routed_experts(x, none, zero_scores, p13, p2, ctx, options=opts)
    assert out.shape == (T, D) and torch.count_nonzero(out) == 0, "every route -1: the output must be exact zeros"

    t = 8
    x8, ids8, s8 = make_tokens(t, D, K, seed=13, device=DEV, ids=upstream_case_ids(t, K, E, shift=1))
    out8 = dist_moe.routed_experts(x8, ids8, s8, p13, p2, ctx)
    assert_aggregate_close(out8, reference_moe(x8, ids8, s8, w13, w2), name="T=8 out", **NVFP4_FWD_TOL)


# ---- graphs and tracing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_nvfp4_inference_cuda_graph_matches_eager(make_ctx, activation):
    """An inference graph captured once with prepared NVFP4 weights (upstream's
    test_nvfp4_inference_cuda_graph_matrix_matches_eager, staged): replays on case a, case b and a
    case whose last token is padded (all routes -1) equal eager calls bitwise; the padded row is zero;
    the outputs of a and b differ; the output has no autograd state. Captured at T and at T = 8."""
    cfg_kw, _ = ACTIVATIONS[activation]
    ctx = make_ctx(**cfg_kw)
    w13, w2 = make_weights(E, D, FF, seed=51, device=DEV)
    p13, p2 = prepare(w13, w2)
    for t in (T, 8):
        x, ids, s = make_tokens(t, D, K, seed=50 + t, device=DEV, ids=upstream_case_ids(t, K, E))
        graph, static, out = capture_inference(x, ids, s, p13, p2, ctx)
        assert out.grad_fn is None
        replays = {}
        for name, seed, shift, padded in (("a", 61, 0, False), ("b", 62, 1, False), ("padded", 63, 2, True)):
            ids = upstream_case_ids(t, K, E, shift=shift)
            if padded:
                ids[-1] = -1
            x, ids, s = make_tokens(t, D, K, seed=seed + t, device=DEV, ids=ids)
            for dst, src in zip(static, (x, ids, s)):
                dst.copy_(src)
            graph.replay()
            replays[name] = out.clone()
            eager = dist_moe.routed_experts(x, ids, s, p13, p2, ctx)
            torch.testing.assert_close(replays[name], eager, rtol=0, atol=0,
                                       msg=lambda m, n=name: f"T={t} {activation} case {n}: replay vs eager: {m}")
            if padded:
                assert replays[name][-1].abs().max() == 0
        assert not torch.equal(replays["a"], replays["b"]), "replays of different inputs must differ"
        del graph


def test_nvfp4_inference_is_visible_to_non_strict_tracing(make_ctx):
    """make_fx of an NVFP4 inference call: one block_scaled_forward (save_for_backward False at 22,
    validate_expert_ids at args[-2]), no DGRAD operands, both inverse global scales passed, no
    weight preparation op; traced == eager bitwise (upstream's
    test_blockscaled_modes_are_visible_to_non_strict_tracing, NVFP4 inference, staged)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    ctx = make_ctx()
    x, ids, scores, w13, w2 = case(seed=37)
    p13, p2 = prepare(w13, w2)

    def fn(x, scores):
        return dist_moe.routed_experts(x, ids, scores, p13, p2, ctx)

    gm = make_fx(fn)(x, scores)
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    fwd = [n for n in nodes if n.target == torch.ops.dist_moe.block_scaled_forward.default]
    assert len(fwd) == 1, gm.graph
    args = fwd[0].args
    assert args[22] is False and args[-2] is False, args
    assert args[5] is None and args[6] is None and args[10] is None and args[11] is None, args  # no DGRAD
    assert args[7] is not None and args[12] is not None, args  # w13 / w2 global_scale_inv
    assert not [n for n in nodes if "prepare" in str(n.target)], gm.graph
    ctx.reset()
    traced = gm(x, scores)
    ctx.reset()
    torch.testing.assert_close(traced, fn(x, scores), rtol=0, atol=0)
    x2, _, s2, _, _ = case(seed=38)  # new tokens on the traced routes
    ctx.reset()
    torch.testing.assert_close(gm(x2, s2), fn(x2, s2), rtol=0, atol=0)


# ---- validation -----------------------------------------------------------------------------------------------


def test_nvfp4_validation_texts(make_ctx):
    """Upstream's NVFP4 rules and the layer's checks, each with its message: training contexts,
    dims not multiples of 256, fast_math, BF16 (unprepared) weights, weights of another format or
    expert count, mixed weights, autograd on an inference context."""
    with pytest.raises(ValueError, match="NVFP4 DistMoE is inference-only"):
        config(inference=False)
    for hidden in (128, 384):  # upstream: D=128 in inference; 384 is a multiple of 128, not of 256
        with pytest.raises(ValueError, match="NVFP4 requires hidden_dim to be a multiple of 256"):
            config(hidden_dim=hidden)
    with pytest.raises(ValueError, match="fast_math is supported only by the MXFP8 fused path"):
        dist_moe.BlockScaledConfig(format=dist_moe.BlockScaledFormat.NVFP4, fast_math=True)

    ctx = make_ctx()
    x, ids, scores, w13, w2 = case(seed=3)
    for grad in (False, True):  # BF16 weights: NVFP4 has no in-call quantization
        with torch.set_grad_enabled(grad), pytest.raises(ValueError, match=NEEDS_PREPARED):
            dist_moe.routed_experts(x, ids, scores, w13, w2, ctx)
    p13, p2 = prepare(w13, w2)
    with pytest.raises(TypeError, match="both be PreparedWeight or both be tensors"):
        dist_moe.routed_experts(x, ids, scores, p13, w2, ctx)
    m13, m2 = prepare(w13, w2, MXFP8)
    with pytest.raises(ValueError, match="w13 was prepared for mxfp8_e4m3, the context runs nvfp4"):
        dist_moe.routed_experts(x, ids, scores, m13, m2, ctx)
    h13, h2 = prepare(w13[:2].contiguous(), w2[:2].contiguous())
    with pytest.raises(ValueError, match=rf"must be prepared from a \[{E}, {2 * FF}, {D}\] weight, got \[2, "
                                         rf"{2 * FF}, {D}\]"):
        dist_moe.routed_experts(x, ids, scores, h13, h2, ctx)
    with pytest.raises(RuntimeError, match="inference contexts do not support autograd"):
        dist_moe.routed_experts(x.clone().requires_grad_(), ids, scores, p13, p2, ctx)
    # Nothing above broke the context: a valid call still runs and matches the reference.
    out = dist_moe.routed_experts(x, ids, scores, p13, p2, ctx)
    assert_aggregate_close(out, reference_moe(x, ids, scores, w13, w2), name="out", **NVFP4_FWD_TOL)


def test_block_scaled_ops_check_global_scale_inv(contexts):
    """block_scaled_forward called directly: an NVFP4 weight without its inverse global scale (or with
    one of the wrong dtype or shape) raises the operand check's ValueError before any device work, a
    complete one equals routed_experts bitwise; on an MXFP8 context a global scale is rejected and
    None (MXFP8's operands as before) equals routed_experts bitwise."""
    op = torch.ops.dist_moe.block_scaled_forward
    ctx = contexts(config())
    x, ids, scores, w13, w2 = case(seed=5)
    p13, p2 = prepare(w13, w2)
    o13, o2 = operands(p13), operands(p2)
    inv = o13[4]
    for t in (None, inv.to(torch.bfloat16), torch.cat([inv, inv])):  # absent, wrong dtype, wrong shape
        with pytest.raises(ValueError, match=r"w13_global_scale_inv must be a contiguous torch.float32 \[4\] tensor"):
            op(*forward_op_args(ctx, x, ids, scores, (*o13[:4], t), o2))
    with pytest.raises(ValueError, match=r"w2_global_scale_inv must be a contiguous torch.float32 \[4\] tensor"):
        op(*forward_op_args(ctx, x, ids, scores, o13, (*o2[:4], None)))
    out, state = op(*forward_op_args(ctx, x, ids, scores, o13, o2))
    assert state.numel() == 0
    torch.testing.assert_close(out, dist_moe.routed_experts(x, ids, scores, p13, p2, ctx), rtol=0, atol=0)

    mctx = contexts(single_rank_config(T, D, FF, K, E, block_scaled=MXFP8, inference=True))
    m13, m2 = prepare(w13, w2, MXFP8)
    assert m13.global_scale_inv is None
    with pytest.raises(ValueError, match="w13_global_scale_inv must be None: mxfp8_e4m3 weights have no global scale"):
        op(*forward_op_args(mctx, x, ids, scores, (*operands(m13)[:4], inv), operands(m2)))
    out, _ = op(*forward_op_args(mctx, x, ids, scores, operands(m13), operands(m2)))
    torch.testing.assert_close(out, dist_moe.routed_experts(x, ids, scores, m13, m2, mctx), rtol=0, atol=0)
