"""One-rank GPU tests of the torch front end (upstream's DistMoeKernelTest rows that apply to BF16).

Every test creates its own context on a real one-rank NCCL group and closes it; numerics are
checked against the reference model on fresh random inputs, graph/tracing paths bitwise against
eager runs of the same context.
"""

import gc
import weakref

import pytest
import torch
import torch.utils.checkpoint as ckpt
from moe_reference import (
    FWD_TOL,
    GRAD_TOL,
    assert_moe_close,
    assert_planner_reset,
    assert_train_close,
    capture_inference,
    leaves,
    make_case,
    make_tokens,
    make_weights,
    reference_moe,
    run_reference,
    run_train,
    single_rank_config,
    upstream_case_ids,
)

import dist_moe

T, D, FF, E, K = 8, 256, 256, 4, 2
DEV = torch.device("cuda", 0)


def config(**kw):
    return single_rank_config(T, D, FF, K, E, **kw)


@pytest.fixture
def make_ctx(contexts):
    return lambda **kw: contexts(config(**kw))


def case(seed=43, shift=0, t=T, ids=None):
    return make_case(t, D, FF, E, K, seed=seed, device=DEV, shift=shift, ids=ids)


def assert_single_rank_close(got, want, tol=3e-2):
    """Upstream's single-rank rows: output at FWD_TOL, every gradient -- the weights' too -- at
    rtol = atol = `tol` (3e-2; 2e-2 for K = 6 and the bounded shapes), relL2 < 1e-2, cos > 0.995."""
    grad_tol = dict(GRAD_TOL, rtol=tol, atol=tol)
    assert_train_close(got, want, grad_tol=grad_tol, wgrad_tol=grad_tol)


# ---- schemas and ownership ---------------------------------------------------------------------------


def test_registered_schemas_expose_mutation_and_wgrad_ownership(make_ctx):
    """bf16 mutates the storages and clip stats; bf16_forward/backward are functional; accumulate_
    write-aliases exactly args 3 and 4."""
    make_ctx()
    bf16 = str(torch.ops.dist_moe.bf16.default._schema)
    assert "Tensor(e!)? swiglu_clip_stats_out_3" in bf16 and "Tensor(a!) activation_storage" in bf16
    assert "!" not in str(torch.ops.dist_moe.bf16_forward.default._schema)
    assert "!" not in str(torch.ops.dist_moe.bf16_forward_with_clip_stats.default._schema)
    assert "!" not in str(torch.ops.dist_moe.bf16_backward.default._schema)
    acc = torch.ops.dist_moe.bf16_backward_accumulate_.default._schema
    written = [i for i, a in enumerate(acc.arguments) if a.alias_info is not None and a.alias_info.is_write]
    assert written == [3, 4]
    assert [acc.arguments[i].name for i in written] == ["accumulator_grad_w13_EFD", "accumulator_grad_w2_EDF"]
    assert all(r.alias_info is None for r in acc.returns)


def test_custom_op_rejects_storage_from_another_owner(make_ctx):
    """Calling dist_moe::bf16 with a storage that is not the context's exact view raises ValueError."""
    ctx = make_ctx(inference=True)
    x, ids, scores, w13, w2 = case()
    rms = (None, False, 0.0, torch.float32, torch.float32, True, 0.0, False, False)
    good = dict(activation=ctx.activation_storage, routing=ctx.routing_storage, dispatch=ctx.dispatch_storage,
                combine=ctx.combine_storage)
    fake = torch.empty(1, dtype=torch.uint8, device=DEV)
    for name in good:
        for bad in (fake, good[name][:-1]):
            s = dict(good, **{name: bad})
            with pytest.raises(ValueError, match=f"{name}_storage does not match the context-owned tensor view"):
                torch.ops.dist_moe.bf16(x, ids, scores, w13, w2, *rms, s["activation"], 0, 1, s["routing"],
                                        s["dispatch"], s["combine"], None, 7.0, False, ctx.context_id)


def test_context_is_factory_only_and_closes_idempotently(make_ctx):
    """Context() raises; close() twice is fine; a closed context raises on use."""
    with pytest.raises(TypeError, match="use create_context"):
        dist_moe.Context()
    ctx = make_ctx()
    ctx.close()
    ctx.close()
    with pytest.raises(RuntimeError, match="closed"):
        _ = ctx.context_id


# ---- numerics --------------------------------------------------------------------------------------------


def test_single_rank_forward_and_backward_match_reference(make_ctx):
    """4D w13 [E, 2, F, D], FP32 WGRAD: output and all grads within upstream's tolerances."""
    ctx = make_ctx(wgrad_dtype=torch.float32, activation_slot_capacity_factor=None, activation_slot_bytes=64 << 20)
    x, ids, scores, w13, w2 = case(seed=29)
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    got = run_train(ctx, x, ids, scores, w13.view(E, 2, FF, D), w2, g)
    assert got[3].shape == (E, 2, FF, D)  # autograd casts the FP32 WGRAD to the leaf's dtype
    assert_single_rank_close(got, run_reference(x, ids, scores, w13, w2, g))
    assert_planner_reset(ctx)


def test_two_saved_layers_match_reference_without_recompute(make_ctx):
    """Two chained layers in one slot of at least the maximum useful bytes: both forwards save their
    activations (no recompute: the slot holds each layer's x and h1, not only x), and the output and
    all seven gradients (x, both layers' scores and weights) match the chained reference at 2e-2."""
    ctx = make_ctx(max_moe_layers_per_activation_slot=2, activation_slot_capacity_factor=None,
                   activation_slot_bytes=64 << 20)
    assert ctx.activation_buffer.activation_slot_bytes >= ctx.memory_plan.maximum_useful_activation_slot_bytes
    x, ids1, s1, w13a, w2a = case(seed=113)
    _, ids2, s2, w13b, w2b = case(seed=115, shift=1)
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)

    def chain(layer, x, s1, w13a, w2a, s2, w13b, w2b):
        return layer(layer(x, ids1, s1, w13a, w2a), ids2, s2, w13b, w2b)

    inputs = leaves(x, s1, w13a, w2a, s2, w13b, w2b)
    out = chain(lambda *a: dist_moe.routed_experts(*a, ctx), *inputs)
    snap = ctx.planner_snapshot()
    assert snap["layer_ids"] == [2], snap
    assert sum(snap["saved_bytes"]) >= 2 * (T * D * 2 + T * K * 2 * FF * 2), snap  # x and h1 of each layer
    out.backward(g)
    want_inputs = leaves(x, s1, w13a, w2a, s2, w13b, w2b)
    want = chain(reference_moe, *want_inputs)
    want.backward(g)
    tol = dict(rtol=2e-2, atol=2e-2)
    assert_moe_close(out, want, name="out", **FWD_TOL)
    names = ("grad_x", "grad_scores1", "grad_w13a", "grad_w2a", "grad_scores2", "grad_w13b", "grad_w2b")
    for name, a, b in zip(names, inputs, want_inputs):
        assert_moe_close(a.grad, b.grad, name=name, **dict(GRAD_TOL, **tol))
    assert_planner_reset(ctx)


def test_context_accepts_bounded_token_shapes(make_ctx):
    """T in {1, 4, 8} of T_max 8 matches the reference at 2e-2; T in {0, 9} raises 'must be in'."""
    ctx = make_ctx()
    for t in (1, 4, 8):
        x, ids, scores, w13, w2 = case(seed=100 + t, t=t)
        g = torch.randn(t, D, device=DEV, dtype=torch.bfloat16)
        want = run_reference(x, ids, scores, w13, w2, g)
        assert_single_rank_close(run_train(ctx, x, ids, scores, w13, w2, g), want, 2e-2)
    x, ids, scores, w13, w2 = case()
    for t in (0, 9):
        xt = torch.randn(t, D, device=DEV, dtype=torch.bfloat16)
        it = torch.zeros(t, K, dtype=torch.int32, device=DEV)
        with pytest.raises(ValueError, match="must be in"):
            dist_moe.routed_experts(xt, it, it.float(), w13, w2, ctx)


def test_padding_routes_match_reference_forward_and_backward(make_ctx):
    """ids[0] = -1 (whole row) and ids[1,1] = -1: row 0 exactly zero, its x.grad zero, score grads of
    -1 routes zero, everything else within tolerance; the planner is back to its initial state."""
    ctx = make_ctx()
    ids = upstream_case_ids(T, K, E)
    ids[0] = -1
    ids[1, 1] = -1
    x, ids, scores, w13, w2 = case(ids=ids)
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    got = run_train(ctx, x, ids, scores, w13, w2, g, dist_moe.ExecutionOptions(validate_expert_ids=True))
    assert got[0][0].abs().max() == 0 and got[1][0].abs().max() == 0
    assert got[2][0].abs().max() == 0 and got[2][1, 1] == 0
    assert_train_close(got, run_reference(x, ids, scores, w13, w2, g))
    assert_planner_reset(ctx)


def test_non_power_of_two_topk_matches_reference(world1):
    """E=8, K=6 BF16 training matches the reference (gradients at 2e-2, as upstream's row)."""
    cfg = config(num_experts=8, top_k=6)
    ctx = dist_moe.create_context(group=world1, config=cfg, device=DEV)
    try:
        x, ids, scores = make_tokens(T, D, 6, seed=5, device=DEV, E=8)
        w13, w2 = make_weights(8, D, FF, seed=6, device=DEV)
        g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
        want = run_reference(x, ids, scores, w13, w2, g)
        assert_single_rank_close(run_train(ctx, x, ids, scores, w13, w2, g), want, 2e-2)
    finally:
        ctx.close()


def test_bf16_clamped_swiglu_matches_reference(make_ctx):
    """Clamped SwiGLU with alpha 1.5 and limit 5.0 matches the reference (forward and grads)."""
    ctx = make_ctx(activation="swiglu_clamped", swiglu_alpha=1.5, swiglu_limit=5.0)
    x, ids, scores, w13, w2 = case(seed=7)
    x = x * 4  # push gate/up values past the limit so the clamp matters
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    ref = run_reference(x, ids, scores, w13, w2, g, activation="swiglu_clamped", alpha=1.5, limit=5.0)
    assert_single_rank_close(run_train(ctx, x, ids, scores, w13, w2, g), ref)


@pytest.mark.parametrize("accumulate", [False, True], ids=["written", "accumulated"])
def test_bf16_registered_rmsnorm_backward_matches_reference(make_ctx, accumulate):
    """RMSNorm postprocess (eps 1e-6, non-bitwise, recompute_rstd) vs F.rms_norm: row 0 (all -1) zero.
    Accumulated: the weight gradients added in place into preset BF16 .grad buffers (upstream's
    BF16 + accumulate row of test_post_expert_rmsnorm_exercises_peer_paths), twice: 2x the first."""
    ctx = make_ctx(wgrad_dtype=torch.bfloat16 if accumulate else None)
    ids = upstream_case_ids(T, K, E)
    ids[0] = -1
    x, ids, scores, w13, w2 = case(seed=11, ids=ids)
    post = dist_moe.RMSNormPostprocess(eps=1e-6, norm_output_dtype=torch.float32, output_dtype=torch.bfloat16,
                                       require_bitwise=False, recompute_rstd=True)
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    want = run_reference(x, ids, scores, w13, w2, g, rmsnorm_eps=1e-6)
    opts = dist_moe.ExecutionOptions(experts_output_postprocess=post, inplace_wgrad_accum=accumulate)
    if not accumulate:
        got = run_train(ctx, x, ids, scores, w13, w2, g, opts)
        assert got[0][0].abs().max() == 0
        assert_single_rank_close(got, want)
        assert_planner_reset(ctx)
        return
    p13, p2 = torch.nn.Parameter(w13.clone()), torch.nn.Parameter(w2.clone())
    p13.grad, p2.grad = torch.zeros_like(w13), torch.zeros_like(w2)
    storages = (p13.grad.data_ptr(), p2.grad.data_ptr())
    for step in (1, 2):
        xs, ss = x.clone().requires_grad_(), scores.clone().requires_grad_()
        out = dist_moe.routed_experts(xs, ids, ss, p13, p2, ctx, options=opts)
        out.backward(g)
        assert (p13.grad.data_ptr(), p2.grad.data_ptr()) == storages, "accumulated into new storage"
        if step == 1:
            assert out[0].abs().max() == 0
            assert_single_rank_close((out.detach(), xs.grad, ss.grad, p13.grad, p2.grad), want)
            first = (p13.grad.clone(), p2.grad.clone())
        else:
            for name, acc, one in zip(("w13", "w2"), (p13.grad, p2.grad), first):
                torch.testing.assert_close(acc.float(), 2 * one.float(), rtol=5e-2, atol=2e-2,
                                           msg=lambda m, n=name: f"{n} after two steps: {m}")
    assert_planner_reset(ctx)


def test_eager_flat_weights_return_logical_gradient_shapes(make_ctx):
    """Flat w13 [E*2F, D] and w2 [E*D, F] through weights_preprocess_fn=torch.clone: flat grads."""
    ctx = make_ctx()
    x, ids, scores, w13, w2 = case(seed=13)
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    opts = dist_moe.ExecutionOptions(weights_preprocess_fn=torch.clone)
    got = run_train(ctx, x, ids, scores, w13.reshape(E * 2 * FF, D), w2.reshape(E * D, FF), g, opts)
    assert got[3].shape == (E * 2 * FF, D) and got[4].shape == (E * D, FF)
    assert_single_rank_close(got, run_reference(x, ids, scores, w13, w2, g))



@pytest.mark.parametrize("postprocess", [None, "callable"], ids=["fused_reduction", "callable_postprocess"])
def test_weights_preprocess_fn_runs_again_before_backward(make_ctx, postprocess):
    """Upstream's weights_preprocess_fn contract: it materializes the compute weights in forward and
    again just before backward (4 calls a step), and the layer keeps nothing it returned in between
    (its forward copies are gone before backward); the step equals the step without the function
    bitwise. Both the registered BF16 ops and the route-level path of a callable postprocess."""
    ctx = make_ctx()
    x, ids, scores, w13, w2 = case(seed=27)
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    post = None if postprocess is None else (lambda h3: h3 * 0.5)
    copies = []

    def materialize(w):  # a copy, as an all-gather or a cast would make, tracked by a weak reference
        c = w.clone()
        copies.append(weakref.ref(c))
        return c

    want = run_train(ctx, x, ids, scores, w13, w2, g, dist_moe.ExecutionOptions(experts_output_postprocess=post))
    opts = dist_moe.ExecutionOptions(weights_preprocess_fn=materialize, experts_output_postprocess=post)
    xl, sl, a, b = leaves(x, scores, w13, w2)
    out = dist_moe.routed_experts(xl, ids, sl, a, b, ctx, options=opts)
    gc.collect()
    assert len(copies) == 2 and all(r() is None for r in copies), "forward copies kept until backward"
    out.backward(g)
    assert len(copies) == 4, f"weights_preprocess_fn ran {len(copies)} times, want 2 forward + 2 backward"
    got = (out.detach(), xl.grad, sl.grad, a.grad, b.grad)
    for name, u, v in zip(("out", "grad_x", "grad_scores", "grad_w13", "grad_w2"), got, want):
        torch.testing.assert_close(u, v, rtol=0, atol=0, msg=lambda m, n=name: f"{n}: with vs without the fn: {m}")
    assert_planner_reset(ctx)

    calls = []

    def recast(w):  # the forward's layout, then FP32 before backward
        calls.append(w)
        return w.clone() if len(calls) <= 2 else w.float()

    xl, a = leaves(x, w13)
    out = dist_moe.routed_experts(xl, ids, scores, a, w2, ctx, options=dist_moe.ExecutionOptions(
        weights_preprocess_fn=recast, experts_output_postprocess=post))
    with pytest.raises(RuntimeError, match="weights_preprocess_fn must return the forward's w13 layout"):
        out.backward(g)


def test_training_call_uses_selected_microbatch_stack(make_ctx):
    """Two slots, select(1, 1): matches the reference, and slot 1 is empty again after backward."""
    ctx = make_ctx(num_activation_slots=2)
    ctx.select_activation_slot(1, 1)
    x, ids, scores, w13, w2 = case(seed=17)
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    assert_single_rank_close(run_train(ctx, x, ids, scores, w13, w2, g), run_reference(x, ids, scores, w13, w2, g))
    assert_planner_reset(ctx)
    with pytest.raises(ValueError, match="activation slot"):
        ctx.select_activation_slot(2, 1)
    with pytest.raises(ValueError, match="num_moe_layers"):
        ctx.select_activation_slot(0, 2)


def test_no_grad_on_training_context_is_scratch_only(make_ctx):
    """A forward under no_grad leaves the slot state untouched and equals the training forward."""
    ctx = make_ctx()
    x, ids, scores, w13, w2 = case(seed=19)
    before = ctx.planner_snapshot()
    with torch.no_grad():
        out_eval = dist_moe.routed_experts(x, ids, scores, w13, w2, ctx)
    assert ctx.planner_snapshot() == before
    assert not out_eval.requires_grad
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    got = run_train(ctx, x, ids, scores, w13, w2, g)
    torch.testing.assert_close(out_eval, got[0], rtol=0, atol=0)
    assert_planner_reset(ctx)


def test_inference_buffer_uses_full_allocation_as_scratch(make_ctx):
    """An inference context's activation buffer is all scratch: no slots, slot bytes 0, the scratch
    size is the whole buffer, the offsets are [buffer end], and select_activation_slot is a no-op."""
    ctx = make_ctx(inference=True)
    ab = ctx.activation_buffer
    assert ab.num_activation_slots == 0 and ab.activation_slot_bytes == 0
    assert ab.device_scratch_size == ab.buffer.numel() > 0
    assert ab.buffer_offsets.tolist() == [ab.buffer.numel()] == ab.initial_buffer_offsets.tolist()
    ctx.select_activation_slot(1, 1)
    assert ab.buffer_offsets.tolist() == [ab.buffer.numel()]
    x, ids, scores, w13, w2 = case(seed=31)
    dist_moe.routed_experts(x, ids, scores, w13, w2, ctx)  # a call after the no-op select still runs
    assert ab.buffer_offsets.tolist() == [ab.buffer.numel()]


def test_activation_slot_selection_is_context_local(make_ctx):
    """Two training contexts with two slots: selecting slot 1 on one leaves the other on slot 0 (its
    host selection and its device slot-id view), no layer is pushed by selecting, and a negative slot
    raises without changing the selection."""
    a, b = make_ctx(num_activation_slots=2), make_ctx(num_activation_slots=2)
    a.select_activation_slot(1, 1)
    assert a.selected_activation_slot == (1, 1)
    assert b.selected_activation_slot == (0, 1)
    assert a.activation_buffer.activation_slot_id_1.tolist() == [1]
    assert b.activation_buffer.activation_slot_id_1.tolist() == [0]
    assert a.activation_buffer.moe_layer_id.tolist() == [0, 0] == b.activation_buffer.moe_layer_id.tolist()
    with pytest.raises(ValueError, match="activation slot"):
        a.select_activation_slot(-1, 1)
    assert a.selected_activation_slot == (1, 1)


def test_inference_rejects_autograd_and_matches_reference(make_ctx):
    """Inference context: matches the reference; inputs requiring grad raise."""
    ctx = make_ctx(inference=True)
    x, ids, scores, w13, w2 = case(seed=23)
    out = dist_moe.routed_experts(x, ids, scores, w13, w2, ctx)
    assert_moe_close(out, reference_moe(x, ids, scores, w13, w2), name="out", **FWD_TOL)
    with pytest.raises(RuntimeError, match="inference contexts do not support autograd"):
        dist_moe.routed_experts(x.clone().requires_grad_(), ids, scores, w13, w2, ctx)


def test_clip_statistics_match_reference_counts(make_ctx):
    """Clip statistics (limit 0.5) equal the reference counts on the pre-activation h1, in training
    and inference; the output equals the output without statistics bitwise."""
    for inference in (False, True):
        ctx = make_ctx(inference=inference)
        x, ids, scores, w13, w2 = case(seed=31)
        plain = dist_moe.routed_experts(x, ids, scores, w13, w2, ctx)
        stats = torch.full((3,), -1.0, device=DEV)
        opts = dist_moe.ExecutionOptions(swiglu_clip_stats_out_3=stats, swiglu_clip_limit=0.5)
        xs = x if inference else x.clone().requires_grad_()
        out = dist_moe.routed_experts(xs, ids, scores, w13, w2, ctx, options=opts)
        torch.testing.assert_close(out.detach(), plain, rtol=0, atol=0)
        _, h1 = reference_moe(x, ids, scores, w13, w2, return_h1=True)
        gate, up = h1.float().chunk(2, dim=-1)
        want = torch.tensor([(gate > 0.5).sum(), (up.abs() > 0.5).sum(), T * K * FF], dtype=torch.float32)
        # The reference's BF16 h1 may round values sitting at the limit differently: allow 0.5%.
        assert stats[2].item() == T * K * FF
        assert torch.allclose(stats.cpu(), want, rtol=5e-3, atol=2), (stats, want)
        if not inference:
            out.sum().backward()
            assert_planner_reset(ctx)


# ---- tracing, graphs, checkpointing ---------------------------------------------------------------------------


def test_bf16_modes_are_visible_to_non_strict_tracing(make_ctx):
    """make_fx shows one opaque bf16_forward (training) / bf16 (inference) op; traced == eager bitwise."""
    from torch.fx.experimental.proxy_tensor import make_fx

    for inference in (False, True):
        ctx = make_ctx(inference=inference)
        x, ids, scores, w13, w2 = case(seed=37)
        if not inference:
            w13.requires_grad_()

        def fn(x, ids, scores, w13, w2):
            return dist_moe.routed_experts(x, ids, scores, w13, w2, ctx)

        gm = make_fx(fn)(x, ids, scores, w13, w2)
        ops = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        want = "dist_moe.bf16.default" if inference else "dist_moe.bf16_forward.default"
        assert ops.count(want) == 1, ops
        ctx.reset()
        traced = gm(x, ids, scores, w13, w2)
        ctx.reset()
        eager = fn(x, ids, scores, w13, w2)
        torch.testing.assert_close(traced, eager, rtol=0, atol=0)
        ctx.reset()


@pytest.mark.parametrize("mode", ["bf16", "accumulate_bf16", "accumulate_fp32"])
def test_training_cuda_graph_matches_eager_forward_and_backward(make_ctx, mode):
    """make_graphed_callables output and grads equal eager bitwise on two different cases."""
    accumulate = mode.startswith("accumulate")
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

    def fn(x, ids, scores, w13, w2):
        return dist_moe.routed_experts(x, ids, scores, w13, w2, ctx, options=opts)

    def fresh_grads():
        # Accumulate mode: the captured backward writes into the .grad storages that existed at
        # capture time, so they are zeroed in place, never replaced.
        for p in (w13, w2):
            if not accumulate:
                p.grad = None
            elif p.grad is None:
                p.grad = torch.zeros(p.shape, dtype=grad_dtype, device=DEV)
            else:
                p.grad.zero_()

    fresh_grads()
    xs = x0.clone().requires_grad_()
    ss = s0.clone().requires_grad_()
    graphed = torch.cuda.make_graphed_callables(fn, (xs, ids0, ss, w13, w2), num_warmup_iters=1,
                                                allow_unused_input=accumulate)
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
        for name, a, b in zip(("out", "x", "scores", "w13", "w2"), *results):
            torch.testing.assert_close(a, b, rtol=0, atol=0, msg=lambda m, n=name: f"{mode} {n}: {m}")
    assert_planner_reset(ctx)


def test_inference_cuda_graphs_replay_bounded_shapes(make_ctx):
    """Inference graphs captured at T=4 and T=8 on one context replay within tolerance of the
    reference on new inputs, including a padded case."""
    ctx = make_ctx(inference=True)
    graphs = {}
    for t in (4, 8):
        x, ids, s, w13, w2 = case(seed=50 + t, t=t)
        graph, static, out = capture_inference(x, ids, s, w13, w2, ctx)
        graphs[t] = (graph, static, out, w13, w2)
    for t, (graph, static, out, w13, w2) in graphs.items():
        for padded in (False, True):
            ids = upstream_case_ids(t, K, E, shift=1)
            if padded:
                ids[-1] = -1
            x, ids, s = make_tokens(t, D, K, seed=60 + t, device=DEV, ids=ids)
            for dst, src in zip(static, (x, ids, s)):
                dst.copy_(src)
            graph.replay()
            assert_moe_close(out, reference_moe(x, ids, s, w13, w2), name=f"T={t}", **FWD_TOL)
            if padded:
                assert out[-1].abs().max() == 0


def test_fused_publication_preserves_cow_inputs_in_cuda_graph(make_ctx):
    """Lazy-clone (copy-on-write) inputs stay lazy, at their read-only addresses, through eager
    inference, a CUDA-graph capture and its replays, and a training step (forward and backward, the
    output gradient lazy too); every result equals the same call on ordinary tensors exactly."""
    if not hasattr(torch, "_lazy_clone") or not hasattr(torch._C, "_data_address"):
        pytest.skip("this torch has no lazy clones")
    x, ids, s, w13, w2 = case(seed=47)

    def lazy_copies(tensors):
        cow = [torch._lazy_clone(t) for t in tensors]
        addresses = [torch._C._data_address(t) for t in cow]
        assert addresses == [torch._C._data_address(t) for t in tensors]  # one allocation until written
        return cow, addresses

    def assert_still_lazy(tensors, addresses, where):
        for i, (t, address) in enumerate(zip(tensors, addresses)):
            assert torch._C._is_cow_tensor(t), f"{where}: input {i} was materialized"
            assert torch._C._data_address(t) == address, f"{where}: input {i} moved"

    ctx = make_ctx(inference=True)
    want = dist_moe.routed_experts(x, ids, s, w13, w2, ctx)
    cow, addresses = lazy_copies((x, ids, s, w13, w2))
    torch.testing.assert_close(dist_moe.routed_experts(*cow, ctx), want, rtol=0, atol=0)
    assert_still_lazy(cow, addresses, "eager inference")
    graph, _static, out = capture_inference(*cow, ctx)
    for _ in range(2):
        out.fill_(float("nan"))
        graph.replay()
        torch.testing.assert_close(out, want, rtol=0, atol=0)
    assert_still_lazy(cow, addresses, "graph replay")

    ctx = make_ctx()
    grad_out = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    want = run_train(ctx, x, ids, s, w13, w2, grad_out)
    cow, addresses = lazy_copies((x, ids, s, w13, w2, grad_out))
    xc, sc, w13c, w2c = (t.requires_grad_() for t in (cow[0], cow[2], cow[3], cow[4]))
    out = dist_moe.routed_experts(xc, cow[1], sc, w13c, w2c, ctx)
    out.backward(cow[5])
    assert_still_lazy(cow, addresses, "training step")
    got = (out.detach(), xc.grad, sc.grad, w13c.grad, w2c.grad)
    for name, a, b in zip(("out", "x", "scores", "w13", "w2"), got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=lambda m, n=name: f"{n}: {m}")
    assert_planner_reset(ctx)


def test_sac_preserves_forward_activation_slot(make_ctx):
    """Selective checkpointing with the effectful forward op MUST_SAVE: the forward runs once (on slot
    0), the backward pops slot 0 although slot 1 is selected meanwhile; bitwise == eager."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    ctx = make_ctx(num_activation_slots=2)
    x, ids, scores, w13, w2 = case(seed=73)
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    eager = run_train(ctx, x, ids, scores, w13, w2, g)
    calls = []

    def policy(_ctx, op, *args, **kwargs):
        if op == torch.ops.dist_moe.bf16_forward.default:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    def fn(x, scores, w13, w2):
        ctx.select_activation_slot(min(len(calls), 1), 1)
        calls.append(1)
        return dist_moe.routed_experts(x, ids, scores, w13, w2, ctx)

    xs, ss, a, b = leaves(x, scores, w13, w2)
    out = ckpt.checkpoint(fn, xs, ss, a, b, use_reentrant=False,
                          context_fn=lambda: create_selective_checkpoint_contexts(policy))
    assert len(calls) == 1
    out.backward(g)
    assert len(calls) == 2
    for name, u, v in zip(("out", "x", "scores", "w13", "w2"), eager, (out.detach(), xs.grad, ss.grad, a.grad, b.grad)):
        torch.testing.assert_close(u, v, rtol=0, atol=0, msg=lambda m, n=name: f"{n}: {m}")
    assert_planner_reset(ctx)


@pytest.mark.parametrize("tracing_mode", ["real", "fake"])
@pytest.mark.parametrize("grad_dtype", [torch.bfloat16, torch.float32])
def test_wgrad_accumulators_are_visible_to_joint_make_fx(make_ctx, grad_dtype, tracing_mode):
    """A joint forward+backward trace (real tensors, or upstream's fake mode: nothing runs) with preset
    .grad buffers holds one impure accumulate node whose args 3 and 4 are views of the gradient
    placeholders and whose args[-2] is the WGRAD dtype. The parameters are inputs of the trace and
    declare FP32 gradients inside it (fake mode copies no grad_dtype onto a parameter it converts)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    if grad_dtype == torch.float32 and not hasattr(torch.Tensor, "grad_dtype"):
        pytest.skip("FP32 .grad on a BF16 parameter needs Tensor.grad_dtype")
    ctx = make_ctx(wgrad_dtype=grad_dtype)
    x, ids, scores, w13_0, w2_0 = case(seed=79)
    opts = dist_moe.ExecutionOptions(inplace_wgrad_accum=True)

    def joint(p13, p2, x, scores, grad_out, g13, g2):
        if grad_dtype == torch.float32:
            p13.grad_dtype = p2.grad_dtype = torch.float32
        p13.grad, p2.grad = g13, g2
        out = dist_moe.routed_experts(x, ids, scores, p13, p2, ctx, options=opts)
        out.backward(grad_out)
        return out.detach()

    p13, p2 = torch.nn.Parameter(w13_0.clone()), torch.nn.Parameter(w2_0.clone())
    g13 = torch.zeros(w13_0.shape, dtype=grad_dtype, device=DEV)
    g2 = torch.zeros(w2_0.shape, dtype=grad_dtype, device=DEV)
    grad_out = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    gm = make_fx(joint, tracing_mode=tracing_mode, _allow_non_fake_inputs=tracing_mode == "fake")(
        p13, p2, x.clone().requires_grad_(), scores.clone().requires_grad_(), grad_out, g13, g2)
    nodes = [n for n in gm.graph.nodes if n.target == torch.ops.dist_moe.bf16_backward_accumulate_.default]
    assert len(nodes) == 1, gm.graph
    assert nodes[0].args[-2] == grad_dtype and nodes[0].is_impure()
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for arg, ph in zip(nodes[0].args[3:5], placeholders[-2:]):  # the accumulators: the last two inputs
        assert arg.target == torch.ops.aten.view.default and arg.args[0] is ph, (arg, ph)
    ctx.reset()


def test_resolves_parameter_wgrad_dtype_contract():
    """Upstream's WGRAD dtype precedence table on a BF16 parameter (declared / Config / existing grad)."""
    from dist_moe._routed import resolve_wgrad_dtype

    bf16, fp32 = torch.bfloat16, torch.float32

    def param(grad=None, declared=None):
        p = torch.nn.Parameter(torch.zeros(6, dtype=bf16))
        if declared is not None:
            p.grad_dtype = declared
        if grad is not None:
            p.grad = torch.zeros(6, dtype=grad)
        return p

    assert resolve_wgrad_dtype(param(), None) == bf16
    assert resolve_wgrad_dtype(param(), fp32) == fp32
    assert resolve_wgrad_dtype(param(grad=bf16), None) == bf16
    with pytest.raises(RuntimeError, match="does not match the resolved WGRAD dtype"):
        resolve_wgrad_dtype(param(grad=bf16), fp32)
    if hasattr(torch.Tensor, "grad_dtype"):
        assert resolve_wgrad_dtype(param(declared=fp32), None) == fp32
        assert resolve_wgrad_dtype(param(grad=fp32, declared=fp32), None) == fp32
        with pytest.raises(RuntimeError, match="conflicts with the parameter's declared grad_dtype"):
            resolve_wgrad_dtype(param(declared=fp32), bf16)
    with pytest.raises(TypeError, match="WGRAD dtype"):
        resolve_wgrad_dtype(torch.nn.Parameter(torch.zeros(6, dtype=torch.float16)), None)


def test_w13_and_w2_resolving_to_different_wgrad_dtypes_raise(make_ctx):
    """inplace_wgrad_accum with W13 declared BF16 and W2 FP32 gradients: the backward raises
    RuntimeError 'different WGRAD dtypes' and neither parameter gets a gradient (upstream's row)."""
    if not hasattr(torch.Tensor, "grad_dtype"):
        pytest.skip("this torch has no Tensor.grad_dtype: a BF16 parameter cannot declare FP32 gradients")
    ctx = make_ctx()
    x, ids, scores, w13, w2 = case(seed=19)
    p13, p2 = torch.nn.Parameter(w13.clone()), torch.nn.Parameter(w2.clone())
    p13.grad_dtype, p2.grad_dtype = torch.bfloat16, torch.float32
    out = dist_moe.routed_experts(x, ids, scores, p13, p2, ctx,
                                  options=dist_moe.ExecutionOptions(inplace_wgrad_accum=True))
    with pytest.raises(RuntimeError, match="different WGRAD dtypes"):
        out.backward(torch.randn_like(out))
    assert p13.grad is None and p2.grad is None


def test_clip_statistics_are_graph_visible(make_ctx):
    """make_fx of a training call with clip statistics: one bf16_forward_with_clip_stats and a
    graph-visible aten.copy_ into the caller's tensor; the traced run gives eager's statistics."""
    from torch.fx.experimental.proxy_tensor import make_fx

    ctx = make_ctx()
    x, ids, scores, w13, w2 = case(seed=83)
    stats = torch.full((3,), -1.0, device=DEV)
    opts = dist_moe.ExecutionOptions(swiglu_clip_stats_out_3=stats, swiglu_clip_limit=0.0)

    def fn(x, scores):
        return dist_moe.routed_experts(x, ids, scores, w13, w2, ctx, options=opts)

    xs, ss = x.clone().requires_grad_(), scores.clone().requires_grad_()
    gm = make_fx(fn)(xs, ss)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.dist_moe.bf16_forward_with_clip_stats.default) == 1
    assert torch.ops.dist_moe.bf16_forward.default not in targets
    assert torch.ops.aten.copy_.default in targets
    ctx.reset()
    stats.fill_(-1)
    gm(xs, ss)
    traced = stats.clone()
    ctx.reset()
    stats.fill_(-1)
    fn(xs, ss)
    assert traced[2].item() == T * K * FF
    torch.testing.assert_close(traced, stats, rtol=0, atol=0)
    ctx.reset()


def test_clip_statistics_count_a_constructed_case_exactly(make_ctx):
    """Upstream's constructed case of test_clip_statistics_are_graph_visible: x rows alternate all +1 /
    all -1, every expert's gate rows are all 1 and its up rows all -1, so h1 is exactly +-D on the
    gate half and -+D on the up half. At limit 0 the statistics are exactly (routes of the +1 tokens
    x F, all routes x F, all routes x F), eager and in a make_fx graph (stats pre-filled with -1), and
    the output equals the output without statistics bitwise."""
    from torch.fx.experimental.proxy_tensor import make_fx

    ctx = make_ctx(inference=True)
    _, ids, scores, _, w2 = case(seed=117)
    sign = torch.where(torch.arange(T, device=DEV) % 2 == 0, 1.0, -1.0)
    x = sign[:, None].expand(T, D).to(torch.bfloat16).contiguous()
    w13 = torch.cat([torch.ones(E, FF, D), -torch.ones(E, FF, D)], dim=1).to(torch.bfloat16).to(DEV)
    stats = torch.full((3,), -1.0, device=DEV)
    opts = dist_moe.ExecutionOptions(swiglu_clip_stats_out_3=stats, swiglu_clip_limit=0.0)

    def fn(x, scores):
        return dist_moe.routed_experts(x, ids, scores, w13, w2, ctx, options=opts)

    want = torch.tensor([(T + 1) // 2 * K * FF, T * K * FF, T * K * FF], dtype=torch.float32)
    plain = dist_moe.routed_experts(x, ids, scores, w13, w2, ctx)
    out = fn(x, scores)
    torch.testing.assert_close(stats.cpu(), want, rtol=0, atol=0)
    torch.testing.assert_close(out, plain, rtol=0, atol=0)
    gm = make_fx(fn)(x, scores)
    stats.fill_(-1)
    torch.testing.assert_close(gm(x, scores), plain, rtol=0, atol=0)
    torch.testing.assert_close(stats.cpu(), want, rtol=0, atol=0)


def test_registered_rmsnorm_policy_round_trips_exactly(make_ctx):
    """Every RMSNormPostprocess field reaches the registered op (its schema's rmsnorm_* arguments in a
    make_fx graph, the weight as the traced input itself) and the native options; None reaches them
    as disabled."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from dist_moe._ops import _options
    from dist_moe._routed import _rmsnorm_args

    ctx = make_ctx(inference=True)
    x, ids, scores, w13, w2 = case(seed=89)
    weight = torch.randn(D, device=DEV, dtype=torch.bfloat16)
    policies = {
        "weighted": dict(eps=1e-5, norm_output_dtype=torch.float32, output_dtype=torch.bfloat16,
                         require_bitwise=False, gain_center=0.5, use_kahan=False, recompute_rstd=True),
        "kahan": dict(eps=3e-6, norm_output_dtype=torch.float32, output_dtype=torch.bfloat16,
                      require_bitwise=True, gain_center=0.0, use_kahan=True, recompute_rstd=False),
    }
    for name, fields in policies.items():
        with_weight = name == "weighted"

        def fn(x, weight):
            post = dist_moe.RMSNormPostprocess(weight=weight if with_weight else None, **fields)
            opts = dist_moe.ExecutionOptions(experts_output_postprocess=post)
            return dist_moe.routed_experts(x, ids, scores, w13, w2, ctx, options=opts)

        gm = make_fx(fn)(x, weight)
        (node,) = [n for n in gm.graph.nodes if n.target == torch.ops.dist_moe.bf16.default]
        args = {a.name: v for a, v in zip(node.target._schema.arguments, node.args)}
        args.update(node.kwargs)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        assert args["rmsnorm_enabled"] is True
        assert args["rmsnorm_weight_D"] is (placeholders[1] if with_weight else None), name
        for field, value in fields.items():
            assert args[f"rmsnorm_{field}"] == value, (name, field, args[f"rmsnorm_{field}"])
        native = _options(_rmsnorm_args(dist_moe.RMSNormPostprocess(weight=weight if with_weight else None,
                                                                   **fields)), 0, 0.0, True)["rmsnorm"]
        assert native["weight"] == (weight.data_ptr() if with_weight else 0)
        assert native["norm_output_dtype"] == "float32" and native["output_dtype"] == "bfloat16"
        for field in ("eps", "require_bitwise", "gain_center", "use_kahan", "recompute_rstd"):
            assert native[field] == fields[field], (name, field)
        ctx.reset()
        torch.testing.assert_close(gm(x, weight), fn(x, weight), rtol=0, atol=0)
    assert _options(_rmsnorm_args(None), 0, 0.0, True)["rmsnorm"] is None


def test_rmsnorm_inference_is_visible_to_non_strict_tracing(make_ctx):
    """BF16 inference with the fused RMSNorm (non-bitwise) under make_fx: one opaque dist_moe.bf16 op,
    and the traced graph matches the reference (F.rms_norm per route row) on two cases."""
    from torch.fx.experimental.proxy_tensor import make_fx

    ctx = make_ctx(inference=True)
    post = dist_moe.RMSNormPostprocess(eps=1e-6, norm_output_dtype=torch.float32, output_dtype=torch.bfloat16,
                                       require_bitwise=False)
    opts = dist_moe.ExecutionOptions(experts_output_postprocess=post)
    x, ids, scores, w13, w2 = case(seed=97)

    def fn(x, ids, scores):
        return dist_moe.routed_experts(x, ids, scores, w13, w2, ctx, options=opts)

    gm = make_fx(fn)(x, ids, scores)
    ops = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert ops.count("dist_moe.bf16.default") == 1, ops
    for seed, shift in ((97, 0), (98, 1)):
        x, ids, scores = make_tokens(T, D, K, seed=seed, device=DEV, ids=upstream_case_ids(T, K, E, shift=shift))
        ctx.reset()
        assert_moe_close(gm(x, ids, scores), reference_moe(x, ids, scores, w13, w2, rmsnorm_eps=1e-6),
                         name=f"seed {seed}", **FWD_TOL)


def test_clip_statistics_replay_in_inference_cuda_graph(make_ctx):
    """An inference call with clip statistics (limit 0) captured in a CUDA graph and replayed on two
    cases and a padded one (last token all -1, scores 0): the output within the forward tolerance of
    the reference, the statistics equal to the reference's counts over the routed h1 exactly, the
    padded token's output zero."""
    ctx = make_ctx(inference=True)
    x, ids, scores, w13, w2 = case(seed=101)
    stats = torch.full((3,), -1.0, device=DEV)
    opts = dist_moe.ExecutionOptions(swiglu_clip_stats_out_3=stats, swiglu_clip_limit=0.0)
    static = [x.clone(), ids.clone(), scores.clone()]
    dist_moe.routed_experts(*static, w13, w2, ctx, options=opts)  # warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = dist_moe.routed_experts(*static, w13, w2, ctx, options=opts)
    replays = []
    for seed, shift, padded in ((102, 0, False), (103, 1, False), (104, 2, True)):
        ids = upstream_case_ids(T, K, E, shift=shift)
        if padded:
            ids[-1] = -1
        x, ids, scores = make_tokens(T, D, K, seed=seed, device=DEV, ids=ids)
        for dst, src in zip(static, (x, ids, scores)):
            dst.copy_(src)
        stats.fill_(-1)
        graph.replay()
        want_out, h1 = reference_moe(x, ids, scores, w13, w2, return_h1=True)
        assert_moe_close(out, want_out, name=f"seed {seed}", **FWD_TOL)
        gate, up = h1.float().chunk(2, dim=-1)
        routed = int((ids >= 0).sum())
        want = torch.tensor([(gate > 0).sum(), (up.abs() > 0).sum(), routed * FF], dtype=torch.float32)
        torch.testing.assert_close(stats.cpu(), want, rtol=0, atol=0)
        if padded:
            assert out[-1].abs().max() == 0
        replays.append(out.clone())
    assert not torch.equal(replays[0], replays[1])


def test_wgrad_callbacks_run_eagerly_in_order(make_ctx):
    """wgrad_postprocess_fn sees w2 then w13 (a None return consumes the gradient);
    wgrad_destination_fn receives both WGRADs (copy or accumulate) and autograd gets none; under
    make_fx the callbacks raise 'require eager execution'."""
    from torch.fx.experimental.proxy_tensor import make_fx

    ctx = make_ctx()
    x, ids, scores, w13, w2 = case(seed=89)
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    want = run_train(ctx, x, ids, scores, w13, w2, g)
    seen = []

    def post(name, grad):
        seen.append(name)
        return None if name == "w13" else grad

    got = run_train(ctx, x, ids, scores, w13, w2, g, dist_moe.ExecutionOptions(wgrad_postprocess_fn=post))
    assert seen == ["w2", "w13"] and got[3] is None
    torch.testing.assert_close(got[4], want[4], rtol=0, atol=0)

    dests = {"w13": (torch.ones_like(w13), True), "w2": (torch.zeros_like(w2), False)}
    opts = dist_moe.ExecutionOptions(wgrad_destination_fn=lambda name, shape, dtype, device: dests[name])
    got = run_train(ctx, x, ids, scores, w13, w2, g, opts)
    assert got[3] is None and got[4] is None
    torch.testing.assert_close(dests["w2"][0], want[4], rtol=0, atol=0)
    torch.testing.assert_close(dests["w13"][0].float(), 1 + want[3].float(), rtol=1e-2, atol=1e-2)
    assert_planner_reset(ctx)

    with pytest.raises(RuntimeError, match="require eager execution"):
        make_fx(lambda x: dist_moe.routed_experts(x, ids, scores, w13, w2, ctx,
                                                  options=dist_moe.ExecutionOptions(wgrad_postprocess_fn=post)))(x)


def fp32_wgrad_step(make_ctx, *, seed):
    """An FP32-WGRAD context, a case, its output gradient and one functional training step on it
    (the FP32 WGRADs kept by grad_dtype leaves): (ctx, case, grad_out, run_train's results). Skips
    where torch has no Tensor.grad_dtype."""
    if not hasattr(torch.Tensor, "grad_dtype"):
        pytest.skip("FP32 gradients of BF16 parameters need Tensor.grad_dtype (torch >= 2.10)")
    ctx = make_ctx(wgrad_dtype=torch.float32)
    c = case(seed=seed)
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    return ctx, c, g, run_train(ctx, *c, g, fp32_wgrad=True)


def test_wgrad_destination_contract(make_ctx):
    """wgrad_destination_fn on an FP32-WGRAD context is asked for each weight's shape, FP32 and device;
    FP32 destinations it returns with accumulate=True receive the WGRADs added to what they held; a
    destination of the wrong shape raises 'requested shape'; the option makes requires_eager true."""
    ctx, (x, ids, scores, w13, w2), g, want = fp32_wgrad_step(make_ctx, seed=107)
    start = {"w13": torch.randn(w13.shape, device=DEV), "w2": torch.randn(w2.shape, device=DEV)}
    dests, asked = {n: t.clone() for n, t in start.items()}, []

    def destination(name, shape, dtype, device):
        asked.append((name, tuple(shape), dtype, device))
        return dests[name], True

    opts = dist_moe.ExecutionOptions(wgrad_destination_fn=destination)
    assert opts.requires_eager
    got = run_train(ctx, x, ids, scores, w13, w2, g, opts)
    assert got[3] is None and got[4] is None
    assert sorted(asked) == [("w13", tuple(w13.shape), torch.float32, w13.device),
                             ("w2", tuple(w2.shape), torch.float32, w2.device)]
    for name, w in (("w13", want[3]), ("w2", want[4])):
        assert w.dtype == torch.float32
        torch.testing.assert_close(dests[name] - start[name], w, rtol=1e-4, atol=1e-4)
    assert_planner_reset(ctx)

    wrong = dist_moe.ExecutionOptions(
        wgrad_destination_fn=lambda name, shape, dtype, device: (torch.zeros(2, 6, 4, device=device, dtype=dtype), True))
    with pytest.raises(RuntimeError, match="requested shape"):
        run_train(ctx, x, ids, scores, w13, w2, g, wrong)
    ctx.reset()


def test_wgrad_accumulation_resolves_explicit_parameter_owner(make_ctx):
    """inplace_wgrad_accum with wgrad_parameter_owners: weights computed from flat BF16 parameters
    (neither leaves nor views of one) accumulate into the owners' existing FP32 .grad (grad_dtype
    FP32) in place -- same storage, start + the context's FP32 WGRAD; without the owners the computed
    weights raise 'view of an autograd leaf', and an owner that does not require grad 'needs gradients'."""
    ctx, (x, ids, scores, w13, w2), g, want = fp32_wgrad_step(make_ctx, seed=109)
    o13, o2 = torch.nn.Parameter(w13.reshape(-1).clone()), torch.nn.Parameter(w2.reshape(-1).clone())
    o13.grad_dtype = o2.grad_dtype = torch.float32
    start = (torch.randn(o13.shape, device=DEV), torch.randn(o2.shape, device=DEV))
    o13.grad, o2.grad = start[0].clone(), start[1].clone()
    storage = (o13.grad.data_ptr(), o2.grad.data_ptr())

    def step(owners):
        opts = dist_moe.ExecutionOptions(inplace_wgrad_accum=True, wgrad_parameter_owners=owners)
        xs, ss = leaves(x, scores)
        c13, c2 = o13.view(w13.shape) * 1, o2.view(w2.shape) * 1  # computed: not leaves, not views
        out = dist_moe.routed_experts(xs, ids, ss, c13, c2, ctx, options=opts)
        out.backward(g)
        return out.detach(), xs.grad, ss.grad

    out, gx, gs = step((o13, o2))
    assert (o13.grad.data_ptr(), o2.grad.data_ptr()) == storage
    assert o13.grad.dtype == o2.grad.dtype == torch.float32
    for got, s0, w in ((o13.grad, start[0], want[3]), (o2.grad, start[1], want[4])):
        torch.testing.assert_close(got - s0, w.reshape(-1), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out, want[0], rtol=0, atol=0)
    torch.testing.assert_close(gx, want[1], rtol=0, atol=0)
    torch.testing.assert_close(gs, want[2], rtol=0, atol=0)
    assert_planner_reset(ctx)

    with pytest.raises(ValueError, match="view of an autograd leaf"):
        step(None)
    ctx.reset()
    frozen = torch.nn.Parameter(o2.detach().clone(), requires_grad=False)
    with pytest.raises(ValueError, match="needs gradients"):
        step((o13, frozen))
    ctx.reset()


def test_dtensor_gradient_owner_resolves_local_storage(make_ctx):
    """A replicated DTensor parameter (a one-rank mesh) as the explicit WGRAD owner: the backward adds
    into its .grad's local shard in place (same storage), start + the functional WGRAD within BF16
    rounding, and autograd hands the computed weights nothing."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, distribute_tensor

    ctx = make_ctx()
    x, ids, scores, w13, w2 = case(seed=119)
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    want = run_train(ctx, x, ids, scores, w13, w2, g)
    mesh = init_device_mesh("cuda", (1,))
    o13, o2 = (torch.nn.Parameter(distribute_tensor(w.reshape(-1).clone(), mesh, [Replicate()])) for w in (w13, w2))
    start = [(torch.randn(o.shape, device=DEV) * 1e-2).to(torch.bfloat16) for o in (o13, o2)]  # small: BF16 sums
    o13.grad, o2.grad = (distribute_tensor(s0.clone(), mesh, [Replicate()]) for s0 in start)
    storage = (o13.grad.to_local().data_ptr(), o2.grad.to_local().data_ptr())
    opts = dist_moe.ExecutionOptions(inplace_wgrad_accum=True, wgrad_parameter_owners=(o13, o2))
    xs, ss = leaves(x, scores)
    c13, c2 = o13.to_local().view(w13.shape) * 1, o2.to_local().view(w2.shape) * 1
    dist_moe.routed_experts(xs, ids, ss, c13, c2, ctx, options=opts).backward(g)
    assert (o13.grad.to_local().data_ptr(), o2.grad.to_local().data_ptr()) == storage
    for o, s0, w in ((o13, start[0], want[3]), (o2, start[1], want[4])):
        assert_moe_close(o.grad.to_local().float() - s0.float(), w.reshape(-1).float(), name="dtensor wgrad",
                         rtol=2e-2, atol=2e-2, rel_l2=1e-2, cos=0.999)
    assert_planner_reset(ctx)


def test_bf16_callback_accumulates_closed_parameter_grad(make_ctx):
    """A callable postprocess h3 * scale_D (scale requires grad) with zero_out_padded_callback_inputs:
    the callback sees zero rows for -1 routes, output and grads (scale's included) match the
    reference, the planner is back to its initial state."""
    ctx = make_ctx()
    ids = upstream_case_ids(T, K, E)
    ids[0] = -1
    x, ids, scores, w13, w2 = case(seed=97, ids=ids)
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    scale0 = (torch.rand(D, device=DEV) + 0.5).to(torch.bfloat16)
    seen_padded = []

    def make_callback(scale, check_padding):
        def callback(h3):
            if check_padding:
                seen_padded.append(h3[0].abs().max().item())
            return h3 * scale
        return callback

    scale = scale0.clone().requires_grad_()
    opts = dist_moe.ExecutionOptions(experts_output_postprocess=make_callback(scale, True),
                                     zero_out_padded_callback_inputs=True)
    got = run_train(ctx, x, ids, scores, w13, w2, g, opts)
    ref_scale = scale0.clone().requires_grad_()
    want = run_reference(x, ids, scores, w13, w2, g, postprocess=make_callback(ref_scale, False))
    assert seen_padded == [0.0]
    assert got[0][0].abs().max() == 0
    assert_single_rank_close(got, want)
    assert_moe_close(scale.grad, ref_scale.grad, name="grad_scale", **GRAD_TOL)
    assert_planner_reset(ctx)
    with pytest.raises(ValueError, match="preserve route shape"):
        dist_moe.routed_experts(x, ids, scores, w13, w2, ctx,
                                options=dist_moe.ExecutionOptions(experts_output_postprocess=lambda h: h[:, :1]))


def test_callback_output_contract(make_ctx):
    """What experts_output_postprocess returns is checked, with upstream's error types and texts: not
    a tensor, another shape, not contiguous, a dtype other than FP16 / BF16 / FP32, another device.
    (Upstream's fifth error, 'changed dtype', compares its backward's replay of the callback with the
    forward's result; here autograd differentiates the forward's one run, so nothing is replayed.)"""
    ctx = make_ctx()
    x, ids, scores, w13, w2 = case(seed=23)
    bad = [(lambda h: h.tolist(), TypeError, "must return a tensor"),
           (lambda h: h[:, :1], ValueError, "preserve route shape"),
           (lambda h: h.transpose(0, 1).contiguous().transpose(0, 1), ValueError, "contiguous"),
           (lambda h: h.double(), TypeError, "float16, bfloat16, or float32"),
           (lambda h: h.cpu(), ValueError, "keep the device")]
    for fn, error, text in bad:
        with pytest.raises(error, match=text):
            dist_moe.routed_experts(x, ids, scores, w13, w2, ctx,
                                    options=dist_moe.ExecutionOptions(experts_output_postprocess=fn))
    # The context is intact after the rejected calls: a good callback gives the plain output scaled.
    half = dist_moe.routed_experts(x, ids, scores, w13, w2, ctx,
                                   options=dist_moe.ExecutionOptions(experts_output_postprocess=lambda h: h * 0.5))
    plain = dist_moe.routed_experts(x, ids, scores, w13, w2, ctx)
    assert_moe_close(half, plain.float() * 0.5, name="out", **FWD_TOL)


def test_rmsnorm_observers_see_route_rows_and_their_gradient(make_ctx):
    """RMSNorm observers (eager) get this rank's route rows h3 (-1 rows zeroed on request) and the
    gradient of h3; the call's output and grads equal the same call without observers bitwise."""
    import torch.nn.functional as F

    ctx = make_ctx()
    ids = upstream_case_ids(T, K, E)
    ids[0] = -1
    x, ids, scores, w13, w2 = case(seed=101, ids=ids)
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    seen = {}
    common = dict(eps=1e-6, norm_output_dtype=torch.float32, output_dtype=torch.bfloat16, require_bitwise=False,
                  recompute_rstd=True)
    observed = dist_moe.RMSNormPostprocess(**common, observe_expert_output_fn=lambda h: seen.setdefault("h3", h.clone()),
                                           observe_expert_output_grad_fn=lambda d: seen.setdefault("grad", d.clone()))
    got = run_train(ctx, x, ids, scores, w13, w2, g,
                    dist_moe.ExecutionOptions(experts_output_postprocess=observed, zero_out_padded_callback_inputs=True))
    plain = run_train(ctx, x, ids, scores, w13, w2, g,
                      dist_moe.ExecutionOptions(experts_output_postprocess=dist_moe.RMSNormPostprocess(**common)))
    for name, a, b in zip(("out", "x", "scores", "w13", "w2"), got, plain):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=lambda m, n=name: f"{n}: {m}")
    h3_ref = reference_moe(x, ids, scores, w13, w2, return_routes=True)
    assert seen["h3"][0].abs().max() == 0
    assert_moe_close(seen["h3"], h3_ref, name="observed h3", **FWD_TOL)
    h3r = h3_ref.detach().float().requires_grad_()
    (F.rms_norm(h3r, (D,), eps=1e-6) * scores.float().unsqueeze(-1)).sum(1).backward(g.float())
    valid = (ids >= 0).unsqueeze(-1)
    assert_moe_close(seen["grad"].float() * valid, h3r.grad * valid, name="observed grad_h3", **GRAD_TOL)
    assert_planner_reset(ctx)
