"""One-rank GPU tests of the MXFP8 staged layer's PyTorch face (upstream's DistMoeKernelTest rows for
MXFP8 staged, and the ops block_scaled_forward / block_scaled_backward /
block_scaled_backward_accumulate_).

Numerics: the layer against (a) a torch emulation of the MXFP8 pipeline at upstream's quantization
points (moe_reference.mxfp8_emulated_moe: out, grad_x and grad_scores, which depend on per-row
quantization only) with the BF16 tolerances, and (b) the BF16 reference with upstream's MXFP8
aggregate tolerances (relative L2 0.075, cosine 0.9975) for everything, the WGRADs included.
Prepared and dynamically quantized weights, eager and traced, eager and graphed, checkpointed and
not, are compared bitwise.
"""

import pytest
import torch
import torch.utils.checkpoint as ckpt
from moe_reference import (
    FWD_TOL,
    GRAD_TOL,
    MXFP8_FWD_TOL,
    OpCalls,
    assert_aggregate_close,
    assert_hooks_fired_once_per_backward,
    assert_moe_close,
    assert_mxfp8_train_close,
    assert_planner_reset,
    capture_inference,
    leaves,
    make_case,
    make_tokens,
    make_weights,
    mxfp8_emulated_moe,
    reference_moe,
    run_reference,
    single_rank_config,
    upstream_case_ids,
)

import dist_moe

T, D, FF, E, K = 32, 256, 256, 4, 2
# Upstream's MXFP8 single-rank token count (T=128, D=F=256, E=4, K=2): the comparisons against the
# BF16 reference, aggregate statistics, use it (at T=32 a 64-element grad_scores is too few samples
# for upstream's relL2 / cosine bounds: measured 8.7e-2 and 9.9e-2 there, cosines 0.99747).
T_UPSTREAM = 128
DEV = torch.device("cuda", 0)
MXFP8 = dist_moe.BlockScaledConfig(format=dist_moe.BlockScaledFormat.MXFP8_E4M3, pipeline="staged")
NAMES = ("out", "grad_x", "grad_scores", "grad_w13", "grad_w2")
CLAMPED = dict(activation="swiglu_clamped", swiglu_alpha=1.5, swiglu_limit=5.0)  # the clamped SwiGLU Config


def config(**kw):
    return single_rank_config(T, D, FF, K, E, **{"block_scaled": MXFP8, **kw})


@pytest.fixture
def make_ctx(contexts):
    return lambda **kw: contexts(config(**kw))


def case(seed=43, shift=0, t=T, ids=None):
    return make_case(t, D, FF, E, K, seed=seed, device=DEV, shift=shift, ids=ids)


# Upstream's two-rank harness (_run_two_rank_numerics), where its MXFP8 RMSNorm and peer-path rows
# live, at world size 1: T=128, D=F=1024, E=4, K=2, routes (g % 4, (g + 2) % 4), x from seed 1000
# scaled by 0.1 for block-scaled formats, weights from seed 2027 scaled D^-1/2 and F^-1/2.
HARNESS_D = 1024


def harness_ctx(contexts, **kw):
    return contexts(single_rank_config(T_UPSTREAM, HARNESS_D, HARNESS_D, K, E, **{"block_scaled": MXFP8, **kw}))


def harness_case():
    """(x, ids, scores, w13, w2, grad_out) of upstream's two-rank harness for rank 0 of world 1."""
    t = torch.arange(T_UPSTREAM)
    ids = torch.stack([t % 4, (t + 2) % 4], dim=1)
    x, ids, scores = make_tokens(T_UPSTREAM, HARNESS_D, K, seed=1000, device=DEV, ids=ids)
    w13, w2 = make_weights(E, HARNESS_D, HARNESS_D, seed=2027, device=DEV)
    gen = torch.Generator(device="cpu").manual_seed(2028)
    g = torch.randn(T_UPSTREAM, HARNESS_D, generator=gen).to(torch.bfloat16).to(DEV)
    return (x * 0.1).to(torch.bfloat16), ids, scores, w13, w2, g


def grad_out(t, *, seed):
    """The output gradient of a case, from its own generator (the comparisons against the BF16
    reference are statistics near upstream's bounds: the data must not depend on test order)."""
    gen = torch.Generator(device="cpu").manual_seed(seed + 1000)
    return torch.randn(t, D, generator=gen).to(torch.bfloat16).to(DEV)


def prepared(w13, w2):
    """Two leaf BF16 weights and their MXFP8 training preparations (WGRAD flows to the leaves)."""
    a, b = leaves(w13, w2)
    return a, b, dist_moe.prepare_block_scaled_weight(a, MXFP8), dist_moe.prepare_block_scaled_weight(b, MXFP8)


def run_train(ctx, x, ids, scores, w13, w2, grad_out, options=None, *, prepare=False):
    """One training step. w13 / w2: BF16 weights (any layout) copied into fresh leaves and quantized
    in the call or, with ``prepare``, prepared first; or PreparedWeights, used as they are (their
    sources' .grad is cleared first). Returns (out, grad_x, grad_scores, grad_w13, grad_w2)."""
    x, scores = leaves(x, scores)
    if isinstance(w13, dist_moe.PreparedWeight):
        a, b = w13, w2
        w13, w2 = a.source, b.source
        w13.grad = w2.grad = None
    elif prepare:
        w13, w2, a, b = prepared(w13, w2)
    else:
        w13, w2 = leaves(w13, w2)
        a, b = w13, w2
    out = dist_moe.routed_experts(x, ids, scores, a, b, ctx, options=options)
    out.backward(grad_out)
    return out.detach(), x.grad, scores.grad, w13.grad, w2.grad


def emulate(x, ids, scores, w13, w2, grad_out, **kw):
    """(out, grad_x, grad_scores) of the torch MXFP8 emulation on fresh preparations of w13 / w2."""
    p13 = dist_moe.prepare_block_scaled_weight(w13, MXFP8)
    p2 = dist_moe.prepare_block_scaled_weight(w2, MXFP8)
    return mxfp8_emulated_moe(x, ids, scores, grad_out, p13, p2, **kw)


def assert_emulated(got, x, ids, scores, w13, w2, grad_out, *, what="", want=None, **kw):
    """out, grad_x and grad_scores equal the torch MXFP8 emulation within the BF16 tolerances' relL2
    and cosine (issue 25: forward relL2 < 5e-3, gradients < 1e-2). Element-wise bounds do not apply:
    where the layer's BF16 h2 / dxy differ from the emulation's in the last bit (GEMM accumulation
    order), an E4M3 rounding of that element may land one E4M3 step apart (measured in session 19:
    a handful of elements per case, 2e-2..5e-2 absolute). ``what`` prefixes the messages; ``want``:
    the emulation's results when the caller has them already."""
    if want is None:
        want = emulate(x, ids, scores, w13, w2, grad_out, **kw)
    for name, g, w, tol in zip(NAMES, got, want, (FWD_TOL, GRAD_TOL, GRAD_TOL)):
        assert_aggregate_close(g, w, name=f"{what}{name} vs MXFP8 emulation", **tol)


def assert_bitwise(a, b, names=NAMES, what=""):
    for name, u, v in zip(names, a, b):
        assert (u is None) == (v is None), f"{what} {name}"
        if u is not None:
            assert u.shape == v.shape, f"{what} {name}: {tuple(u.shape)} vs {tuple(v.shape)}"
            torch.testing.assert_close(u, v, rtol=0, atol=0, msg=lambda m, n=name: f"{what} {n}: {m}")


# ---- ops ------------------------------------------------------------------------------------------------------


def test_block_scaled_schemas_carry_upstreams_names_and_ownership():
    """block_scaled_forward takes the ten prepared operands (five per weight: DGRAD ones and the
    NVFP4 global_scale_inv optional), save_for_backward, slot, depth, validate_expert_ids and the
    context id (27 arguments); forward and backward are
    functional and registered as effects; the accumulate op write-aliases exactly args 3 and 4."""
    fwd = torch.ops.dist_moe.block_scaled_forward.default._schema
    names = [a.name for a in fwd.arguments]
    assert len(names) == 27 and names[-2:] == ["validate_expert_ids", "context_id"], names
    assert names[3:13] == ["w13_fprop_data", "w13_fprop_scale", "w13_dgrad_data", "w13_dgrad_scale",
                           "w13_global_scale_inv", "w2_fprop_data", "w2_fprop_scale", "w2_dgrad_data",
                           "w2_dgrad_scale", "w2_global_scale_inv"]
    assert names[22:25] == ["save_for_backward", "activation_slot", "num_moe_layers_in_slot"]
    assert "!" not in str(fwd) and "!" not in str(torch.ops.dist_moe.block_scaled_backward.default._schema)
    acc = torch.ops.dist_moe.block_scaled_backward_accumulate_.default._schema
    written = [i for i, a in enumerate(acc.arguments) if a.alias_info is not None and a.alias_info.is_write]
    assert written == [3, 4]
    assert [acc.arguments[i].name for i in written] == ["accumulator_grad_w13_EFD", "accumulator_grad_w2_EDF"]
    assert acc.arguments[-2].name == "wgrad_dtype" and all(r.alias_info is None for r in acc.returns)
    from dist_moe import _ops

    assert torch.ops.dist_moe.block_scaled_forward.default in _ops.EFFECTFUL_OPS
    assert torch.ops.dist_moe.block_scaled_backward.default in _ops.EFFECTFUL_OPS


# ---- contexts and validation ----------------------------------------------------------------------------------


def test_mxfp8_staged_contexts_and_unsupported_block_scaled_configs(world1):
    """MXFP8 training and inference contexts, staged and Mega, are created with plan_memory's plan;
    fast_math, kernel_config and dims not multiple of 128 raise the C++ context's ValueError (NVFP4
    inference runs: test_nvfp4.py; the Mega refusals: test_mega.py)."""
    for pipeline in ("staged", "mega"):
        for inference in (False, True):
            cfg = config(block_scaled=dist_moe.BlockScaledConfig(pipeline=pipeline), inference=inference)
            ctx = dist_moe.create_context(group=world1, config=cfg, device=DEV)
            try:
                assert ctx.memory_plan == dist_moe.plan_memory(cfg, 1), (pipeline, inference)
            finally:
                ctx.close()
    kernel = dist_moe.BlockScaledKernelConfig(num_ctas=1, block_m=128, block_n=128, block_k=128, num_smem_buffers=4,
                                              epilogue_subtile=32, kloop_unroll=1, swap_ab=False)
    rejected = [
        (config(block_scaled=dist_moe.BlockScaledConfig(fast_math=True)), "fast_math"),
        (config(block_scaled=dist_moe.BlockScaledConfig(kernel_config=kernel)), "kernel_config"),
        (config(hidden_dim=192, intermediate_dim=192), "multiples of 128"),
    ]
    for cfg, message in rejected:
        with pytest.raises(ValueError, match=message):
            dist_moe.create_context(group=world1, config=cfg, device=DEV)


def test_block_scaled_validation_texts(make_ctx):
    """Clip statistics, mixed / foreign / inference preparations, wrong expert counts and layouts
    fail with their messages before (or, for the C++ checks, at) the layer."""
    ctx = make_ctx()
    x, ids, scores, w13, w2 = case(seed=3)
    p13 = dist_moe.prepare_block_scaled_weight(w13, MXFP8)
    p2 = dist_moe.prepare_block_scaled_weight(w2, MXFP8)
    stats = torch.zeros(3, device=DEV)
    with pytest.raises(ValueError, match="SwiGLU clip statistics are supported only by BF16"):
        dist_moe.routed_experts(x, ids, scores, p13, p2, ctx,
                                options=dist_moe.ExecutionOptions(swiglu_clip_stats_out_3=stats))
    with pytest.raises(TypeError, match="both be PreparedWeight or both be tensors"):
        dist_moe.routed_experts(x, ids, scores, p13, w2, ctx)
    with pytest.raises(ValueError, match="weights_preprocess_fn"):
        dist_moe.routed_experts(x, ids, scores, p13, p2, ctx,
                                options=dist_moe.ExecutionOptions(weights_preprocess_fn=torch.clone))
    nv13 = dist_moe.prepare_block_scaled_weight(w13, dist_moe.BlockScaledConfig(format="nvfp4"))
    nv2 = dist_moe.prepare_block_scaled_weight(w2, dist_moe.BlockScaledConfig(format="nvfp4"))
    with pytest.raises(ValueError, match="w13 was prepared for nvfp4, the context runs mxfp8_e4m3"):
        dist_moe.routed_experts(x, ids, scores, nv13, nv2, ctx)
    i13 = dist_moe.prepare_block_scaled_weight(w13, MXFP8, inference=True)
    i2 = dist_moe.prepare_block_scaled_weight(w2, MXFP8, inference=True)
    for grad in (False, True):  # the C++ layer: no Hopper GEMM reads 1x32 row-scaled weights yet
        with torch.set_grad_enabled(grad), pytest.raises(ValueError, match="no Hopper GEMM yet"):
            dist_moe.routed_experts(x.clone().requires_grad_(grad), ids, scores, i13, i2, ctx)
    half13 = dist_moe.prepare_block_scaled_weight(w13[:2].contiguous(), MXFP8)
    half2 = dist_moe.prepare_block_scaled_weight(w2[:2].contiguous(), MXFP8)
    with pytest.raises(ValueError, match=r"must be prepared from a \[4, 512, 256\] weight"):
        with torch.no_grad():
            dist_moe.routed_experts(x, ids, scores, half13, half2, ctx)
    with pytest.raises(ValueError, match="weights must contain 4 local experts"):
        dist_moe.routed_experts(x, ids, scores, w13[:2], w2[:2], ctx)
    with pytest.raises(ValueError, match="incompatible expert-weight layouts"):
        dist_moe.routed_experts(x, ids, scores, w13.reshape(-1, D), w2, ctx)
    bf16_ctx = make_ctx(block_scaled=None)
    with pytest.raises(ValueError, match="cannot be used with a BF16 context"):
        dist_moe.routed_experts(x, ids, scores, p13, p2, bf16_ctx)
    torch.cuda.synchronize()
    assert_planner_reset(ctx)  # nothing above reached a kernel that pushes to a slot


# ---- numerics -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("weights", ["prepared", "dynamic"])
def test_mxfp8_forward_and_backward_match_references(make_ctx, weights):
    """Training with prepared (WGRAD to their sources) or dynamically quantized weights: out, grad_x
    and grad_scores within the BF16 tolerances of the torch MXFP8 emulation; everything within
    upstream's MXFP8 tolerances of the BF16 reference; the planner is empty afterwards."""
    ctx = make_ctx(wgrad_dtype=torch.float32, max_num_local_input_tokens=T_UPSTREAM)
    x, ids, scores, w13, w2 = case(seed=29, t=T_UPSTREAM)
    g = grad_out(T_UPSTREAM, seed=29)
    got = run_train(ctx, x, ids, scores, w13, w2, g, prepare=weights == "prepared")
    assert got[3].shape == w13.shape and got[4].shape == w2.shape
    assert_emulated(got, x, ids, scores, w13, w2, g)
    assert_mxfp8_train_close(got, run_reference(x, ids, scores, w13, w2, g))
    assert_planner_reset(ctx)


def test_prepared_and_dynamic_weights_are_bitwise_equal(make_ctx):
    """Prepared weights and the same BF16 weights quantized in the call (3D, gate-axis 4D and flat
    layouts) give bitwise-equal outputs and gradients, each WGRAD in its weight's logical shape."""
    ctx = make_ctx()
    x, ids, scores, w13, w2 = case(seed=31)
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    want = run_train(ctx, x, ids, scores, w13, w2, g, prepare=True)
    for a, b in ((w13, w2), (w13.view(E, 2, FF, D), w2), (w13.reshape(E * 2 * FF, D), w2.reshape(E * D, FF))):
        got = run_train(ctx, x, ids, scores, a, b, g)
        assert got[3].shape == a.shape and got[4].shape == b.shape
        assert_bitwise(want, [got[0], got[1], got[2], got[3].reshape(w13.shape), got[4].reshape(w2.shape)],
                       what=f"w13 {tuple(a.shape)}")
    assert_planner_reset(ctx)


def test_mxfp8_clamped_swiglu_matches_references(make_ctx):
    """Clamped SwiGLU (alpha 1.5, limit 5.0). With x * 4, h1 well past the limit on both halves (the
    clamp's branches exercised): the emulation within the BF16 tolerances. The clamp's gradient is
    discontinuous at the limit and at x * 4 many h1 elements sit near it, where the MXFP8 noise moves
    them between clamped and unclamped: the BF16 reference is no yardstick there (measured: grad_x
    relL2 0.14). The comparison with it runs as upstream's test_mxfp8_clamped_swiglu_matches_reference
    does: unscaled x at upstream's T=128, aggregate MXFP8 tolerances."""
    kw = dict(activation="swiglu_clamped", alpha=1.5, limit=5.0)
    ctx = make_ctx(**CLAMPED)
    x, ids, scores, w13, w2 = case(seed=7)
    x = x * 4
    _, h1 = reference_moe(x, ids, scores, w13, w2, return_h1=True, **kw)
    gate, up = h1.float().chunk(2, dim=-1)
    assert (gate > 5.0).any() and (up.abs() > 5.0).any(), "x * 4 should push h1 past the clamp limit"
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    got = run_train(ctx, x, ids, scores, w13, w2, g, prepare=True)
    assert_emulated(got, x, ids, scores, w13, w2, g, what="x*4: ", **kw)

    ctx = make_ctx(max_num_local_input_tokens=T_UPSTREAM, **CLAMPED)
    x, ids, scores, w13, w2 = case(seed=7, t=T_UPSTREAM)
    g = torch.randn(T_UPSTREAM, D, device=DEV, dtype=torch.bfloat16)
    got = run_train(ctx, x, ids, scores, w13, w2, g, prepare=True)
    assert_mxfp8_train_close(got, run_reference(x, ids, scores, w13, w2, g, **kw))


def test_mxfp8_padding_routes_match_reference(make_ctx):
    """ids[0] = -1 (whole row), ids[1, 1] = -1, validate_expert_ids: row 0 of out and x.grad exactly
    zero, score grads of -1 routes zero, the rest within tolerance; the planner is empty afterwards."""
    ctx = make_ctx(max_num_local_input_tokens=T_UPSTREAM)
    ids = upstream_case_ids(T_UPSTREAM, K, E)
    ids[0] = -1
    ids[1, 1] = -1
    x, ids, scores, w13, w2 = case(seed=11, ids=ids, t=T_UPSTREAM)
    g = grad_out(T_UPSTREAM, seed=11)
    got = run_train(ctx, x, ids, scores, w13, w2, g, dist_moe.ExecutionOptions(validate_expert_ids=True),
                    prepare=True)
    assert got[0][0].abs().max() == 0 and got[1][0].abs().max() == 0
    assert got[2][0].abs().max() == 0 and got[2][1, 1] == 0
    assert_emulated(got, x, ids, scores, w13, w2, g)
    assert_mxfp8_train_close(got, run_reference(x, ids, scores, w13, w2, g))
    assert_planner_reset(ctx)


def rel_l2(a, b) -> float:
    a, b = a.detach().float(), b.detach().float()
    return ((a - b).norm() / b.norm().clamp_min(1e-12)).item()


def test_mxfp8_bounded_token_shapes(make_ctx):
    """T in {1, 8} of T_max 32, then T = 32, on one context, prepared weights. Every per-token result
    (out, grad_x, grad_scores) of a bounded call equals bitwise the same tokens' rows of the T = 32
    call (the tokens are the first T of one case; quantization is per row and each row's GEMM sums
    run in the same order wherever the row lands in a tile), and each call equals bitwise the same
    call on a fresh context (state carried over from a smaller T would differ there). The T = 32
    call is checked against the emulation. The small T are not judged against the emulation alone:
    the layer's BF16 h1 differs from the exact one in the last bit where the FP8 accumulation
    crosses a rounding midpoint, and ~0.4% of its h2 E4M3 codes land one step apart (session 20,
    W2 = identity, measured: 16 of 4096 codes at T = 8); one such step on a large element moves
    that token's out by up to ~5%, so a relative L2 over eight tokens is a coin toss."""
    ctx = make_ctx()
    x, ids, scores, w13, w2 = case(seed=132, t=T)
    g = torch.randn(T, D, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16).to(DEV)
    failures = []

    def check(assertion, *args, **kw):
        try:
            assertion(*args, **kw)
        except AssertionError as e:
            failures.append(str(e))

    calls = {}
    for t in (1, 8, T):
        args = (x[:t], ids[:t], scores[:t], w13, w2, g[:t])
        calls[t] = run_train(ctx, *args, prepare=True)
        fresh = run_train(make_ctx(), *args, prepare=True)
        check(assert_bitwise, fresh, calls[t], what=f"T={t}: one context (after the smaller T) vs a fresh context:")
    for t in (1, 8):
        check(assert_bitwise, calls[t][:3], [r[:t] for r in calls[T][:3]],
              what=f"T={t}: the bounded call vs the first {t} tokens of T={T}:")
    want = emulate(x, ids, scores, w13, w2, g)
    print("T=32 relL2 vs MXFP8 emulation: " + ", ".join(f"{n} {rel_l2(a, b):.2e}" for n, a, b in zip(NAMES, calls[T], want)))
    check(assert_emulated, calls[T], x, ids, scores, w13, w2, g, what=f"T={T}: ", want=want)
    assert_planner_reset(ctx)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("pipeline", ["staged", "mega"])
def test_mxfp8_rmsnorm_postprocess_matches_reference(contexts, pipeline):
    """The fused RMSNorm postprocess (eps 1e-6, non-bitwise, recompute_rstd) on MXFP8 experts, staged
    and Mega, vs F.rms_norm over the BF16 reference, with a fully padded row (exact zero), on
    upstream's two-rank harness data (test_post_expert_rmsnorm_exercises_peer_paths; see harness_case)."""
    bs = dist_moe.BlockScaledConfig(format=dist_moe.BlockScaledFormat.MXFP8_E4M3, pipeline=pipeline)
    ctx = harness_ctx(contexts, block_scaled=bs)
    x, ids, scores, w13, w2, g = harness_case()
    ids[0] = -1
    scores = torch.where(ids >= 0, scores, torch.zeros_like(scores))
    post = dist_moe.RMSNormPostprocess(eps=1e-6, norm_output_dtype=torch.float32, output_dtype=torch.bfloat16,
                                       require_bitwise=False, recompute_rstd=True)
    got = run_train(ctx, x, ids, scores, w13, w2, g, dist_moe.ExecutionOptions(experts_output_postprocess=post),
                    prepare=True)
    assert got[0][0].abs().max() == 0
    assert_mxfp8_train_close(got, run_reference(x, ids, scores, w13, w2, g, rmsnorm_eps=1e-6))
    assert_planner_reset(ctx)


def test_mxfp8_eager_callbacks(contexts):
    """A callable postprocess (h3 * 0.5) and a wgrad_postprocess_fn (sees w2, then w13) run eagerly on
    an MXFP8 context: within tolerance of the reference on upstream's two-rank harness data (its
    test_expert_and_wgrad_postprocess_exercise_peer_paths row, BF16 there), and the WGRAD hook's
    grads equal the plain call's bitwise."""
    ctx = harness_ctx(contexts)
    x, ids, scores, w13, w2, g = harness_case()
    got = run_train(ctx, x, ids, scores, w13, w2, g,
                    dist_moe.ExecutionOptions(experts_output_postprocess=lambda h3: h3 * 0.5), prepare=True)
    assert_mxfp8_train_close(got, run_reference(x, ids, scores, w13, w2, g, postprocess=lambda h3: h3 * 0.5))
    seen = []

    def hook(name, grad):
        seen.append(name)
        return grad

    plain = run_train(ctx, x, ids, scores, w13, w2, g, prepare=True)
    hooked = run_train(ctx, x, ids, scores, w13, w2, g, dist_moe.ExecutionOptions(wgrad_postprocess_fn=hook),
                       prepare=True)
    assert seen == ["w2", "w13"]
    assert_bitwise(plain, hooked, what="wgrad_postprocess_fn")
    assert_planner_reset(ctx)


# ---- no-grad, inference -----------------------------------------------------------------------------------------


def test_mxfp8_no_grad_on_training_context_is_scratch_only(make_ctx):
    """Under no_grad (prepared weights whose sources require grad, and dynamic weights) the slots are
    untouched, the output does not require grad and equals the training forward bitwise."""
    ctx = make_ctx()
    x, ids, scores, w13, w2 = case(seed=19)
    a, b, p13, p2 = prepared(w13, w2)
    before = ctx.planner_snapshot()
    with torch.no_grad():
        out_prepared = dist_moe.routed_experts(x, ids, scores, p13, p2, ctx)
        out_dynamic = dist_moe.routed_experts(x, ids, scores, a, b, ctx)
    assert ctx.planner_snapshot() == before
    assert not out_prepared.requires_grad
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    got = run_train(ctx, x, ids, scores, w13, w2, g, prepare=True)
    torch.testing.assert_close(out_prepared, got[0], rtol=0, atol=0)
    torch.testing.assert_close(out_dynamic, got[0], rtol=0, atol=0)
    assert_planner_reset(ctx)

    # The same no-grad call captured in a CUDA graph: each replay equals eager bitwise on a new case
    # and leaves the slot state as it was.
    static = [x.clone(), scores.clone()]
    with torch.no_grad():
        dist_moe.routed_experts(static[0], ids, static[1], p13, p2, ctx)  # warm up outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out_graph = dist_moe.routed_experts(static[0], ids, static[1], p13, p2, ctx)
    before = ctx.planner_snapshot()
    for seed in (20, 21):
        x2, _, s2, _, _ = case(seed=seed)
        static[0].copy_(x2)
        static[1].copy_(s2)
        graph.replay()
        with torch.no_grad():
            eager = dist_moe.routed_experts(x2, ids, s2, p13, p2, ctx)
        torch.testing.assert_close(out_graph, eager, rtol=0, atol=0)
        assert ctx.planner_snapshot() == before


def test_mxfp8_inference_context(make_ctx):
    """Inference reads training preparations (their FPROP fields): prepared and dynamic weights give
    the same bits, within tolerance of the emulation and the BF16 reference; sources that require grad
    do not make an inference call an autograd call, x requiring grad raises."""
    ctx = make_ctx(inference=True)
    x, ids, scores, w13, w2 = case(seed=23)
    a, b, p13, p2 = prepared(w13, w2)  # a, b require grad
    out = dist_moe.routed_experts(x, ids, scores, p13, p2, ctx)
    assert out.grad_fn is None
    dynamic = dist_moe.routed_experts(x, ids, scores, w13, w2, ctx)
    torch.testing.assert_close(out, dynamic, rtol=0, atol=0)
    g = torch.zeros(T, D, device=DEV, dtype=torch.bfloat16)
    want = mxfp8_emulated_moe(x, ids, scores, g, p13, p2, training=False)[0]
    assert_moe_close(out, want, name="inference out vs MXFP8 emulation", **FWD_TOL)
    assert_aggregate_close(out, reference_moe(x, ids, scores, w13, w2), name="inference out", **MXFP8_FWD_TOL)
    with pytest.raises(RuntimeError, match="inference contexts do not support autograd"):
        dist_moe.routed_experts(x.clone().requires_grad_(), ids, scores, p13, p2, ctx)


# ---- tracing, graphs, checkpointing, accumulation -------------------------------------------------------------


@pytest.mark.parametrize("weights", ["prepared", "dynamic"])
def test_mxfp8_modes_are_visible_to_non_strict_tracing(make_ctx, weights):
    """make_fx of a training call, a no-grad call on the training context and an inference call: one
    block_scaled_forward each (save_for_backward True / False / False; validate_expert_ids at
    args[-2]), dynamic weights add two prepare_mxfp8_weight; traced == eager bitwise."""
    from torch.fx.experimental.proxy_tensor import make_fx

    for mode in ("train", "no_grad", "inference"):
        ctx = make_ctx(inference=mode == "inference")
        x, ids, scores, w13, w2 = case(seed=37)
        a, b, p13, p2 = prepared(w13, w2)
        if mode == "inference":
            a, b = w13, w2  # the inference context takes no weights that require grad
        w = (p13, p2) if weights == "prepared" else (a, b)

        def fn(x, scores):
            with torch.set_grad_enabled(mode == "train"):
                return dist_moe.routed_experts(x, ids, scores, *w, ctx)

        xs = x.clone().requires_grad_(mode == "train")
        gm = make_fx(fn)(xs, scores)
        nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
        fwd = [n for n in nodes if n.target == torch.ops.dist_moe.block_scaled_forward.default]
        assert len(fwd) == 1, gm.graph
        assert fwd[0].args[22] is (mode == "train") and fwd[0].args[-2] is False, fwd[0].args
        preps = [n for n in nodes if n.target == torch.ops.dist_moe.prepare_mxfp8_weight.default]
        assert len(preps) == (2 if weights == "dynamic" else 0), gm.graph
        ctx.reset()
        traced = gm(xs, scores)
        ctx.reset()
        eager = fn(xs, scores)
        torch.testing.assert_close(traced, eager, rtol=0, atol=0)
        ctx.reset()


@pytest.mark.parametrize("mode", ["dynamic", "prepared", "dynamic_accumulate_bf16", "prepared_accumulate_fp32"])
def test_mxfp8_training_cuda_graph_matches_eager(make_ctx, mode):
    """make_graphed_callables over an MXFP8 training call (weights quantized inside the graph, or
    prepared outside it with the parameters as their sources; functional or accumulating WGRAD): the
    output and all four grads equal eager bitwise on two different cases."""
    accumulate = "accumulate" in mode
    grad_dtype = torch.float32 if mode.endswith("fp32") else torch.bfloat16
    if grad_dtype == torch.float32 and not hasattr(torch.Tensor, "grad_dtype"):
        pytest.skip("FP32 gradients of BF16 parameters need Tensor.grad_dtype (torch >= 2.10)")
    ctx = make_ctx(wgrad_dtype=grad_dtype if accumulate else None)
    opts = dist_moe.ExecutionOptions(inplace_wgrad_accum=accumulate)
    x0, ids0, s0, w13_0, w2_0 = case(seed=41)
    w13 = torch.nn.Parameter(w13_0.clone())
    w2 = torch.nn.Parameter(w2_0.clone())
    if grad_dtype == torch.float32:
        w13.grad_dtype = w2.grad_dtype = torch.float32
    pw = (dist_moe.prepare_block_scaled_weight(w13, MXFP8), dist_moe.prepare_block_scaled_weight(w2, MXFP8))

    def fn(x, ids, scores, w13, w2):
        weights = pw if mode.startswith("prepared") else (w13, w2)  # pw's sources are w13 and w2
        return dist_moe.routed_experts(x, ids, scores, *weights, ctx, options=opts)

    def fresh_grads():
        for p in (w13, w2):
            if not accumulate:
                p.grad = None
            elif p.grad is None:
                p.grad = torch.zeros(p.shape, dtype=grad_dtype, device=DEV)
            else:
                p.grad.zero_()

    fresh_grads()
    graphed = torch.cuda.make_graphed_callables(fn, (x0.clone().requires_grad_(), ids0, s0.clone().requires_grad_(),
                                                     w13, w2), num_warmup_iters=1, allow_unused_input=True)
    for seed, shift in ((41, 0), (43, 1)):
        x, ids, s, _, _ = case(seed=seed, shift=shift)
        g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
        results = []
        for f in (fn, graphed):
            fresh_grads()
            xi, si = x.clone().requires_grad_(), s.clone().requires_grad_()
            out = f(xi, ids, si, w13, w2)
            out.backward(g)
            results.append([out.detach().clone(), xi.grad.clone(), si.grad.clone(), w13.grad.clone(), w2.grad.clone()])
        assert_bitwise(*results, what=mode)
    assert_planner_reset(ctx)


def test_mxfp8_inference_cuda_graph_replays_bounded_shapes(make_ctx):
    """Inference graphs captured at T=8 and T=32 with prepared weights replay within tolerance of the
    emulation on new inputs (a padded case included); the output has no autograd state."""
    ctx = make_ctx(inference=True)
    w13, w2 = make_weights(E, D, FF, seed=51, device=DEV)
    p13 = dist_moe.prepare_block_scaled_weight(w13, MXFP8)
    p2 = dist_moe.prepare_block_scaled_weight(w2, MXFP8)
    graphs = {}
    for t in (8, 32):
        x, ids, s = make_tokens(t, D, K, seed=50 + t, device=DEV, ids=upstream_case_ids(t, K, E))
        graph, static, out = capture_inference(x, ids, s, p13, p2, ctx)
        assert out.grad_fn is None
        graphs[t] = (graph, static, out)
    for t, (graph, static, out) in graphs.items():
        for padded in (False, True):
            ids = upstream_case_ids(t, K, E, shift=1)
            if padded:
                ids[-1] = -1
            x, ids, s = make_tokens(t, D, K, seed=60 + t, device=DEV, ids=ids)
            for dst, src in zip(static, (x, ids, s)):
                dst.copy_(src)
            graph.replay()
            want = mxfp8_emulated_moe(x, ids, s, torch.zeros_like(x), p13, p2, training=False)[0]
            assert_moe_close(out, want, name=f"T={t}", **FWD_TOL)
            if padded:
                assert out[-1].abs().max() == 0


@pytest.mark.parametrize("activation", ["swiglu", "swiglu_clamped"])
@pytest.mark.parametrize("weights", ["prepared", "dynamic"])
def test_mxfp8_activation_checkpointing_matches_eager_bitwise(make_ctx, weights, activation):
    """Non-reentrant checkpoint around the layer (its first forward keeps nothing in the slot) and
    selective checkpointing with block_scaled_forward MUST_SAVE (the forward runs once, its slot is
    popped although slot 1 is selected meanwhile): bitwise == eager, the planner empty afterwards;
    plain and clamped SwiGLU (upstream's staged rows of test_mxfp8_training_effects_preserve_eager_bitwise)."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    ctx = make_ctx(num_activation_slots=2, **(CLAMPED if activation == "swiglu_clamped" else {}))
    x, ids, scores, w13, w2 = case(seed=73)
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    a, b, p13, p2 = prepared(w13, w2)
    calls = []

    def fn(x, scores):
        ctx.select_activation_slot(min(len(calls), 1), 1)
        calls.append(1)
        return dist_moe.routed_experts(x, ids, scores, *((p13, p2) if weights == "prepared" else (a, b)), ctx)

    def run(wrap):
        calls.clear()
        for p in (a, b):
            p.grad = None
        xs, ss = leaves(x, scores)
        out = wrap(xs, ss)
        slot_layers = ctx.activation_buffer.moe_layer_id.tolist()
        out.backward(g)
        assert_planner_reset(ctx)
        return (out.detach(), xs.grad, ss.grad, a.grad.clone(), b.grad.clone()), slot_layers, len(calls)

    def policy(_ctx, op, *args, **kwargs):
        if op == torch.ops.dist_moe.block_scaled_forward.default:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    eager, layers, n = run(fn)
    assert layers == [1, 0] and n == 1
    plain, layers, n = run(lambda *t: ckpt.checkpoint(fn, *t, use_reentrant=False))
    assert layers == [0, 0] and n == 2  # nothing kept by the first forward; recomputed for the backward
    assert_bitwise(eager, plain, what="checkpoint")
    sac, layers, n = run(lambda *t: ckpt.checkpoint(
        fn, *t, use_reentrant=False, context_fn=lambda: create_selective_checkpoint_contexts(policy)))
    assert layers == [1, 0] and n == 2  # the cached forward's state stays on slot 0 until its backward
    assert_bitwise(eager, sac, what="selective checkpoint")


@pytest.mark.parametrize("grad_dtype", [torch.bfloat16, torch.float32])
def test_mxfp8_wgrad_accumulates_into_source_grad(make_ctx, grad_dtype):
    """inplace_wgrad_accum with prepared weights: the first backward attaches .grad to the sources
    (functional op), the second adds into the same storages -- exactly one
    block_scaled_backward_accumulate_ call, on the .grad storages themselves: .grad = 2x the first
    contribution, pointers kept -- and each source's post-accumulate hook fires once per backward."""
    if grad_dtype == torch.float32 and not hasattr(torch.Tensor, "grad_dtype"):
        pytest.skip("FP32 gradients of BF16 parameters need Tensor.grad_dtype (torch >= 2.10)")
    ctx = make_ctx(wgrad_dtype=grad_dtype)
    x, ids, scores, w13, w2 = case(seed=79)
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    p13, p2 = torch.nn.Parameter(w13.clone()), torch.nn.Parameter(w2.clone())
    if grad_dtype == torch.float32:
        p13.grad_dtype = p2.grad_dtype = torch.float32
    fired = []
    for p in (p13, p2):
        p.register_post_accumulate_grad_hook(lambda p: fired.append(p))
    pw13, pw2 = (dist_moe.prepare_block_scaled_weight(p, MXFP8) for p in (p13, p2))
    opts = dist_moe.ExecutionOptions(inplace_wgrad_accum=True)
    firsts = []
    for step in range(2):
        xs, ss = leaves(x, scores)
        with OpCalls(torch.ops.dist_moe.block_scaled_backward_accumulate_.default) as calls:
            dist_moe.routed_experts(xs, ids, ss, pw13, pw2, ctx, options=opts).backward(g)
        firsts.append((p13.grad.clone(), p2.grad.clone(), p13.grad.data_ptr(), p2.grad.data_ptr()))
        assert len(calls.args) == step, f"step {step}: {len(calls.args)} accumulate calls"
        assert_hooks_fired_once_per_backward(fired, p13, p2, step)
    (g13, g2, ptr13, ptr2), (_, _, ptr13b, ptr2b) = firsts
    acc13, acc2 = calls.args[0][3], calls.args[0][4]
    assert (acc13.data_ptr(), acc2.data_ptr()) == (ptr13, ptr2), "the accumulate op adds into .grad itself"
    assert p13.grad.dtype == grad_dtype and p2.grad.dtype == grad_dtype
    assert (ptr13, ptr2) == (ptr13b, ptr2b), "accumulation must keep the .grad storages"
    torch.testing.assert_close(p13.grad.float(), 2 * g13.float(), rtol=5e-2, atol=2e-2)
    torch.testing.assert_close(p2.grad.float(), 2 * g2.float(), rtol=5e-2, atol=2e-2)
    want = run_reference(x, ids, scores, w13, w2, g)
    assert_aggregate_close(g13, want[3], name="grad_w13", rel_l2=0.075, cos=0.9975)
    assert_aggregate_close(g2, want[4], name="grad_w2", rel_l2=0.075, cos=0.9975)
    assert_planner_reset(ctx)


@pytest.mark.parametrize("tracing_mode", ["real", "fake"])
@pytest.mark.parametrize("grad_dtype", [torch.bfloat16, torch.float32])
def test_mxfp8_wgrad_accumulators_are_visible_to_joint_make_fx(make_ctx, grad_dtype, tracing_mode):
    """A joint forward+backward trace (real tensors, or upstream's fake mode: nothing runs) with
    preset .grad buffers (BF16, or FP32 on grad_dtype FP32 parameters) on the prepared weights'
    sources holds one block_scaled_backward_accumulate_, impure, whose args 3 and 4 are views of the
    gradient placeholders and whose args[-2] is the WGRAD dtype."""
    from torch.fx.experimental.proxy_tensor import make_fx

    if grad_dtype == torch.float32 and not hasattr(torch.Tensor, "grad_dtype"):
        pytest.skip("FP32 gradients of BF16 parameters need Tensor.grad_dtype (torch >= 2.10)")
    ctx = make_ctx(wgrad_dtype=grad_dtype)
    x, ids, scores, w13_0, w2_0 = case(seed=83)
    p13, p2 = torch.nn.Parameter(w13_0.clone()), torch.nn.Parameter(w2_0.clone())
    if grad_dtype == torch.float32:
        p13.grad_dtype = p2.grad_dtype = torch.float32
    pw13, pw2 = (dist_moe.prepare_block_scaled_weight(p, MXFP8) for p in (p13, p2))
    opts = dist_moe.ExecutionOptions(inplace_wgrad_accum=True)

    def joint(x, scores, g13, g2, grad_out):
        p13.grad, p2.grad = g13, g2
        out = dist_moe.routed_experts(x, ids, scores, pw13, pw2, ctx, options=opts)
        out.backward(grad_out)
        return out.detach()

    g13, g2 = torch.zeros_like(w13_0, dtype=grad_dtype), torch.zeros_like(w2_0, dtype=grad_dtype)
    grad_out = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    gm = make_fx(joint, tracing_mode=tracing_mode, _allow_non_fake_inputs=tracing_mode == "fake")(
        x.clone().requires_grad_(), scores.clone().requires_grad_(), g13, g2, grad_out)
    op = torch.ops.dist_moe.block_scaled_backward_accumulate_.default
    nodes = [n for n in gm.graph.nodes if n.target == op]
    assert len(nodes) == 1, gm.graph
    assert nodes[0].args[-2] == grad_dtype and nodes[0].is_impure()
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for arg, ph in zip(nodes[0].args[3:5], placeholders[2:4]):
        assert arg.target == torch.ops.aten.view.default and arg.args[0] is ph, (arg, ph)
    ctx.reset()


def test_mxfp8_refilled_weights_train_like_fresh_preparations(make_ctx):
    """A training loop that re-prepares with out= after each optimizer step computes what fresh
    preparations of the updated parameters compute, bitwise (the examples/mxfp8_training.py pattern)."""
    ctx = make_ctx()
    x, ids, scores, w13, w2 = case(seed=89)
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    p13, p2 = torch.nn.Parameter(w13.clone()), torch.nn.Parameter(w2.clone())
    pw13, pw2 = (dist_moe.prepare_block_scaled_weight(p, MXFP8) for p in (p13, p2))
    opt = torch.optim.SGD([p13, p2], lr=1e-3)  # lr 0.5 sent the weights to NaN in three steps
    for _ in range(3):
        opt.zero_grad()
        dist_moe.routed_experts(x, ids, scores, pw13, pw2, ctx).backward(g)
        opt.step()
        with torch.no_grad():
            pw13 = dist_moe.prepare_block_scaled_weight(p13, MXFP8, out=pw13)
            pw2 = dist_moe.prepare_block_scaled_weight(p2, MXFP8, out=pw2)
    refilled = run_train(ctx, x, ids, scores, pw13, pw2, g)[:3]
    fresh = run_train(ctx, x, ids, scores, p13.detach(), p2.detach(), g, prepare=True)[:3]
    assert all(torch.isfinite(t).all() for t in refilled), "the trained weights stayed finite"
    assert_bitwise(refilled, fresh, NAMES[:3], what="refilled vs fresh")
    assert_planner_reset(ctx)
