"""One-rank GPU tests of the Mega pipeline through the PyTorch face (issue #28; docs/block_scaled_layer.md
"Mega"): ``BlockScaledConfig(pipeline="mega")`` inference contexts -- NVFP4 at decode sizes, MXFP8 at
decode sizes (the 16-token tiles) and beyond (the rows form, 128x128 tiles) -- give the staged
context's output bit for bit on the same prepared weights, eagerly and in CUDA graph replays; MXFP8
training contexts (the forward in one launch) give the output and all four gradients of a staged
context on the per-32 FPROPs (DMOE_MXFP8_FPROP_PER32=1) bit for bit; what is not built is refused with
its text.

Numerics: Mega runs the staged kernels' tiles and per-row code, so the comparison is bitwise (in
training against the staged per-32 FPROPs: the default staged FPROPs read the rows at shared scales
on the FP8-blockwise kernel, perf_history G151); the staged contexts' own checks against the BF16
reference are test_nvfp4.py's and test_mxfp8.py's.
"""

import pytest
import torch
from moe_reference import (
    assert_planner_reset,
    capture_inference,
    make_tokens,
    make_weights,
    single_rank_config,
    upstream_case_ids,
)

import dist_moe

DEV = torch.device("cuda", 0)
D, FF, E, K = 512, 256, 4, 2  # multiples of 256: the decode form's hand-off takes 256 values per step
NVFP4 = dist_moe.BlockScaledFormat.NVFP4
MXFP8 = dist_moe.BlockScaledFormat.MXFP8_E4M3
CLAMPED = dict(activation="swiglu_clamped", swiglu_alpha=1.5, swiglu_limit=5.0)
# (format, tokens per call = the context's T): at most 12 routed rows per local expert is the decode
# form (T = 8: 4 per expert); T = 128 (64 per expert) MXFP8's rows form.
CASES = [(NVFP4, 8), (MXFP8, 8), (MXFP8, 128)]


def config(fmt, t, pipeline, inference=True, **kw):
    bs = dist_moe.BlockScaledConfig(format=fmt, pipeline=pipeline)
    return single_rank_config(t, D, FF, K, E, block_scaled=bs, inference=inference, **kw)


def prepare_pair(w13, w2, fmt=MXFP8):
    """Both weights prepared in `fmt` (MXFP8: the training preparation's 32x32 tiles, which inference
    contexts take too, docs/block_scaled_layer.md); a source that requires grad receives the WGRAD."""
    cfg = dist_moe.BlockScaledConfig(format=fmt)
    return dist_moe.prepare_block_scaled_weight(w13, cfg), dist_moe.prepare_block_scaled_weight(w2, cfg)


def prepared(fmt, seed):
    """Prepared weights of seeded BF16 weights, as an inference context of `fmt` takes them."""
    return prepare_pair(*make_weights(E, D, FF, seed=seed, device=DEV), fmt)


def fmt_name(fmt):
    return "nvfp4" if fmt == NVFP4 else "mxfp8"


@pytest.mark.parametrize("clamped", [False, True], ids=["swiglu", "swiglu_clamped"])
@pytest.mark.parametrize("fmt,t", CASES, ids=[f"{fmt_name(f)}_T{t}" for f, t in CASES])
def test_mega_inference_matches_staged_bitwise(contexts, fmt, t, clamped):
    """Mega and staged contexts of the same config on the same inputs: equal outputs, on two calls
    (the chunk counters start from zero again), with fewer tokens than the context's T, and with a
    fully padded token (all routes -1: an exact zero row)."""
    kw = CLAMPED if clamped else {}
    staged = contexts(config(fmt, t, "staged", **kw))
    mega = contexts(config(fmt, t, "mega", **kw))
    p13, p2 = prepared(fmt, seed=71)
    for calls, (n, shift, padded) in enumerate(((t, 0, False), (t, 1, True), (max(t // 2, 1), 2, False))):
        ids = upstream_case_ids(n, K, E, shift=shift)
        if padded:
            ids[-1] = -1
        x, ids, s = make_tokens(n, D, K, seed=80 + calls, device=DEV, ids=ids)
        want = dist_moe.routed_experts(x, ids, s, p13, p2, staged)
        for repeat in range(2):
            got = dist_moe.routed_experts(x, ids, s, p13, p2, mega)
            torch.testing.assert_close(got, want, rtol=0, atol=0,
                                       msg=lambda m: f"{fmt_name(fmt)} T={t} call {calls}.{repeat}: mega vs staged: {m}")
        if padded:
            assert got[-1].abs().max() == 0


@pytest.mark.parametrize("clamped", [False, True], ids=["swiglu", "swiglu_clamped"])
@pytest.mark.parametrize("fmt,t", CASES, ids=[f"{fmt_name(f)}_T{t}" for f, t in CASES])
def test_mega_inference_cuda_graph_matches_staged(contexts, fmt, t, clamped):
    """A Mega inference call captured once: replays on new inputs equal the staged context's eager
    output bitwise (the counters' memset is a node of the graph), the last one with a fully padded
    token (an exact zero row); plain and clamped SwiGLU (upstream's graph matrix, Mega rows)."""
    kw = CLAMPED if clamped else {}
    staged = contexts(config(fmt, t, "staged", **kw))
    mega = contexts(config(fmt, t, "mega", **kw))
    p13, p2 = prepared(fmt, seed=72)
    x, ids, s = make_tokens(t, D, K, seed=90, device=DEV, ids=upstream_case_ids(t, K, E))
    graph, static, out = capture_inference(x, ids, s, p13, p2, mega)
    for replay, (shift, padded) in enumerate(((1, False), (2, False), (3, True))):
        ids = upstream_case_ids(t, K, E, shift=shift)
        if padded:
            ids[-1] = -1
        x, ids, s = make_tokens(t, D, K, seed=91 + replay, device=DEV, ids=ids)
        for dst, src in zip(static, (x, ids, s)):
            dst.copy_(src)
        graph.replay()
        want = dist_moe.routed_experts(x, ids, s, p13, p2, staged)
        torch.testing.assert_close(out, want, rtol=0, atol=0,
                                   msg=lambda m: f"{fmt_name(fmt)} T={t} replay {replay} vs staged eager: {m}")
        if padded:
            assert out[-1].abs().max() == 0
    del graph


@pytest.mark.parametrize("t", [8, 128], ids=["T8", "T128"])
def test_mega_mxfp8_inference_dynamic_weights_equal_prepared(contexts, t):
    """MXFP8 Mega inference on BF16 weights (quantized in the call) gives exactly the output of the
    same weights prepared beforehand (upstream's test_mxfp8_staged_and_mega_inference_match_reference,
    its dynamic == prepared part, Mega rows; the staged rows are test_mxfp8.py's)."""
    mega = contexts(config(MXFP8, t, "mega"))
    w13, w2 = make_weights(E, D, FF, seed=75, device=DEV)
    p13, p2 = prepare_pair(w13, w2)
    x, ids, s = make_tokens(t, D, K, seed=120, device=DEV, ids=upstream_case_ids(t, K, E))
    want = dist_moe.routed_experts(x, ids, s, p13, p2, mega)
    got = dist_moe.routed_experts(x, ids, s, w13, w2, mega)
    torch.testing.assert_close(got, want, rtol=0, atol=0, msg=lambda m: f"T={t}: dynamic vs prepared: {m}")


@pytest.mark.parametrize("fmt,t", CASES, ids=[f"{fmt_name(f)}_T{t}" for f, t in CASES])
def test_mega_inference_make_fx_matches_staged(contexts, fmt, t):
    """make_fx of a Mega inference call: the one block_scaled_forward op a staged call records (the
    pipeline is the context's), and the traced call equals the staged context's eager output."""
    from torch.fx.experimental.proxy_tensor import make_fx

    staged = contexts(config(fmt, t, "staged"))
    mega = contexts(config(fmt, t, "mega"))
    p13, p2 = prepared(fmt, seed=74)
    x, ids, s = make_tokens(t, D, K, seed=110, device=DEV, ids=upstream_case_ids(t, K, E))
    gm = make_fx(lambda x, s: dist_moe.routed_experts(x, ids, s, p13, p2, mega))(x, s)
    ops = [n for n in gm.graph.nodes if n.op == "call_function" and n.target == torch.ops.dist_moe.block_scaled_forward.default]
    assert len(ops) == 1, gm.graph
    mega.reset()
    traced = gm(x, s)
    torch.testing.assert_close(traced, dist_moe.routed_experts(x, ids, s, p13, p2, staged), rtol=0, atol=0)


@pytest.mark.parametrize("clamped", [False, True], ids=["swiglu", "swiglu_clamped"])
def test_mega_training_matches_staged_bitwise(contexts, monkeypatch, clamped):
    """MXFP8 training at 128 routed rows per expert (the staged per-32 GEMMs' 128x128 tiles): one step on
    a Mega context and on a staged one on the per-32 FPROPs (the knob is read at context creation) --
    output, grad_x, grad_scores and both weight gradients (through the preparations' sources) -- equal
    bitwise, twice."""
    kw = CLAMPED if clamped else {}
    t = 256
    monkeypatch.setenv("DMOE_MXFP8_FPROP_PER32", "1")
    staged = contexts(config(MXFP8, t, "staged", inference=False, **kw))
    monkeypatch.delenv("DMOE_MXFP8_FPROP_PER32")
    mega = contexts(config(MXFP8, t, "mega", inference=False, **kw))
    w13, w2 = make_weights(E, D, FF, seed=73, device=DEV)

    def step(ctx, x, ids, s, g):
        x, s = x.clone().requires_grad_(), s.clone().requires_grad_()
        a, b = w13.clone().requires_grad_(), w2.clone().requires_grad_()
        p13, p2 = prepare_pair(a, b)
        out = dist_moe.routed_experts(x, ids, s, p13, p2, ctx)
        out.backward(g)
        return out.detach(), x.grad, s.grad, a.grad, b.grad

    names = ("out", "grad_x", "grad_scores", "grad_w13", "grad_w2")
    for call in range(2):
        x, ids, s = make_tokens(t, D, K, seed=100 + call, device=DEV, ids=upstream_case_ids(t, K, E, shift=call))
        gen = torch.Generator(device="cpu").manual_seed(200 + call)
        g = torch.randn(t, D, generator=gen).to(torch.bfloat16).to(DEV)
        want, got = step(staged, x, ids, s, g), step(mega, x, ids, s, g)
        for name, a, b in zip(names, got, want):
            torch.testing.assert_close(a, b, rtol=0, atol=0, msg=lambda m, n=name: f"call {call} {n}: mega vs staged: {m}")



@pytest.mark.parametrize("pipeline", ["mega", "staged"])
def test_mxfp8_mega_rebuilds_callback_weight_quants_in_backward(contexts, monkeypatch, pipeline):
    """Upstream's row: with weights_preprocess_fn (identity, recorded) and dynamic BF16 weights, Mega
    quantizes the weights again in backward instead of keeping the forward's quantizations -- the
    training preparation runs 4 times a step (2 forward + 2 backward), the staged pipeline keeps them
    (2) -- and the function itself runs 4 times on both. The step equals, bitwise, the same step
    without the function (which keeps the forward's quantizations)."""
    from dist_moe import _routed

    t = 256
    ctx = contexts(config(MXFP8, t, pipeline, inference=False))
    w13, w2 = make_weights(E, D, FF, seed=75, device=DEV)
    x, ids, s = make_tokens(t, D, K, seed=175, device=DEV, ids=upstream_case_ids(t, K, E))
    g = torch.randn(t, D, generator=torch.Generator(device="cpu").manual_seed(275)).to(torch.bfloat16).to(DEV)
    quants, materialized = [], []
    counted = _routed.training_prepare_op

    def counting_prepare_op(fmt):
        op = counted(fmt)
        return lambda w: (quants.append(tuple(w.shape)), op(w))[1]

    monkeypatch.setattr(_routed, "training_prepare_op", counting_prepare_op)

    def identity(w):
        materialized.append(tuple(w.shape))
        return w

    def step(options):
        xl, sl = x.clone().requires_grad_(), s.clone().requires_grad_()
        a, b = w13.clone().requires_grad_(), w2.clone().requires_grad_()
        out = dist_moe.routed_experts(xl, ids, sl, a, b, ctx, options=options)
        out.backward(g)
        return out.detach(), xl.grad, sl.grad, a.grad, b.grad

    want = step(None)
    assert len(quants) == 2, quants
    quants.clear()
    got = step(dist_moe.ExecutionOptions(weights_preprocess_fn=identity))
    assert len(materialized) == 4, materialized
    assert len(quants) == (4 if pipeline == "mega" else 2), quants
    assert _routed._recompute_dynamic_mega_weight_quants(ctx.config, dist_moe.ExecutionOptions(
        weights_preprocess_fn=identity)) == (pipeline == "mega")
    for name, a, b in zip(("out", "grad_x", "grad_scores", "grad_w13", "grad_w2"), got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0,
                                   msg=lambda m, n=name: f"{pipeline} {n}: with vs without: {m}")
    assert_planner_reset(ctx)


def test_dynamic_mxfp8_mega_weight_quant_recompute_policy():
    """Upstream's policy row: the backward quantizes dynamic weights again only for a training MXFP8
    Mega context with weights_preprocess_fn; not for inference, staged, other formats or no fn."""
    from dist_moe import _routed

    fn = dist_moe.ExecutionOptions(weights_preprocess_fn=lambda w: w)
    none = dist_moe.ExecutionOptions()

    def cfg(fmt=MXFP8, pipeline="mega", inference=False):
        bs = dist_moe.BlockScaledConfig(format=fmt, pipeline=pipeline)
        return single_rank_config(8, D, FF, K, E, block_scaled=bs, inference=inference)

    policy = _routed._recompute_dynamic_mega_weight_quants
    assert policy(cfg(), fn)
    assert not policy(cfg(), none)
    assert not policy(cfg(inference=True), fn)
    assert not policy(cfg(pipeline="staged"), fn)
    assert not policy(cfg(fmt=dist_moe.BlockScaledFormat.FP8_BLOCKWISE, pipeline="staged"), fn)
    assert not policy(single_rank_config(8, D, FF, K, E), fn)


def mega_training_case(contexts, *, clamped, seed, t=256):
    """A Mega MXFP8 training context with two activation slots at t tokens (t = 256: 128 routed rows
    per expert, the staged GEMMs' 128x128 tiles), two leaf BF16 weights, their MXFP8 preparations and
    a case's tokens: (t, ctx, (w13, w2) leaves, (p13, p2) prepared, (x, ids, scores))."""
    ctx = contexts(config(MXFP8, t, "mega", inference=False, num_activation_slots=2, **(CLAMPED if clamped else {})))
    w13, w2 = make_weights(E, D, FF, seed=seed, device=DEV)
    a, b = w13.clone().requires_grad_(), w2.clone().requires_grad_()
    prepared = prepare_pair(a, b)
    tokens = make_tokens(t, D, K, seed=seed + 100, device=DEV, ids=upstream_case_ids(t, K, E))
    return t, ctx, (a, b), prepared, tokens


def test_mega_selective_checkpoint_on_slot_1_equals_eager_on_slot_0(contexts):
    """Clamped SwiGLU on a Mega MXFP8 training context (upstream's clamped/mega row of
    test_mxfp8_training_effects_preserve_eager_bitwise): a run under selective checkpointing (the
    effectful ops saved, the rest recomputed) whose forward selects slot 1 gives eager's slot-0 output
    and gradients bitwise, and the planner is empty after each backward."""
    from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

    t, ctx, (a, b), (p13, p2), (x, ids, s) = mega_training_case(contexts, clamped=True, seed=71)
    g = torch.randn(t, D, generator=torch.Generator().manual_seed(172)).to(torch.bfloat16).to(DEV)

    def run(slot, wrap):
        a.grad = b.grad = None
        xs, ss = x.clone().requires_grad_(), s.clone().requires_grad_()

        def fn(xs, ss):
            ctx.select_activation_slot(slot, 1)
            return dist_moe.routed_experts(xs, ids, ss, p13, p2, ctx)

        out = wrap(fn, xs, ss)
        out.backward(g)
        assert_planner_reset(ctx)
        return out.detach(), xs.grad, ss.grad, a.grad.clone(), b.grad.clone()

    def policy(_ctx, op, *args, **kwargs):
        effectful = (torch.ops.dist_moe.block_scaled_forward.default, torch.ops.dist_moe.prepare_mxfp8_weight.default)
        return CheckpointPolicy.MUST_SAVE if op in effectful else CheckpointPolicy.PREFER_RECOMPUTE

    eager = run(0, lambda fn, *t: fn(*t))
    sac = run(1, lambda fn, *t: checkpoint(fn, *t, use_reentrant=False,
                                           context_fn=lambda: create_selective_checkpoint_contexts(policy)))
    for name, u, v in zip(("out", "grad_x", "grad_scores", "grad_w13", "grad_w2"), sac, eager):
        torch.testing.assert_close(u, v, rtol=0, atol=0, msg=lambda m, n=name: f"{n}: SAC slot 1 vs eager slot 0: {m}")


def test_mega_training_context_no_grad_is_scratch_only(contexts):
    """A no-grad call on a Mega MXFP8 training context: no autograd state, the slot state unchanged;
    make_fx shows one block_scaled_forward that saves nothing, traced == eager bitwise; a CUDA graph
    replay == eager bitwise with the state unchanged; a following training call's output equals the
    no-grad output bitwise and its backward empties the planner."""
    from torch.fx.experimental.proxy_tensor import make_fx

    t, ctx, _, (p13, p2), (x, ids, s) = mega_training_case(contexts, clamped=False, seed=75)

    def fn(x, s):
        with torch.no_grad():
            return dist_moe.routed_experts(x, ids, s, p13, p2, ctx)

    before = ctx.planner_snapshot()
    eager = fn(x, s)
    assert not eager.requires_grad and ctx.planner_snapshot() == before

    gm = make_fx(fn)(x, s)
    fwd = [n for n in gm.graph.nodes if n.target == torch.ops.dist_moe.block_scaled_forward.default]
    assert len(fwd) == 1 and fwd[0].args[22] is False, gm.graph
    torch.testing.assert_close(gm(x, s), eager, rtol=0, atol=0)
    assert ctx.planner_snapshot() == before

    static = [x.clone(), s.clone()]
    fn(*static)  # warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_graph = fn(*static)
    graph.replay()
    torch.testing.assert_close(out_graph, eager, rtol=0, atol=0)
    assert ctx.planner_snapshot() == before

    xs, ss = x.clone().requires_grad_(), s.clone().requires_grad_()
    out = dist_moe.routed_experts(xs, ids, ss, p13, p2, ctx)
    torch.testing.assert_close(out.detach(), eager, rtol=0, atol=0)
    out.backward(torch.randn_like(out))
    assert_planner_reset(ctx)


def test_mega_prepared_weights_accumulate_parameter_grad(contexts, monkeypatch):
    """inplace_wgrad_accum into FP32 .grad (grad_dtype FP32) of the preparations' source parameters,
    two calls on a Mega MXFP8 training context and two on a staged one on the per-32 FPROPs from the
    same start: the accumulated gradients equal bitwise, and each context keeps the .grad storages."""
    if not hasattr(torch.Tensor, "grad_dtype"):
        pytest.skip("FP32 gradients of BF16 parameters need Tensor.grad_dtype (torch >= 2.10)")
    t = 256
    w13, w2 = make_weights(E, D, FF, seed=77, device=DEV)
    start = (torch.randn(w13.shape, device=DEV), torch.randn(w2.shape, device=DEV))
    opts = dist_moe.ExecutionOptions(inplace_wgrad_accum=True)
    cases = []
    for call in range(2):
        x, ids, s = make_tokens(t, D, K, seed=177 + call, device=DEV, ids=upstream_case_ids(t, K, E, shift=call))
        g = torch.randn(t, D, generator=torch.Generator().manual_seed(277 + call)).to(torch.bfloat16).to(DEV)
        cases.append((x, ids, s, g))
    grads = {}
    for pipeline in ("staged", "mega"):
        if pipeline == "staged":  # (the knob is read at context creation)
            monkeypatch.setenv("DMOE_MXFP8_FPROP_PER32", "1")
        ctx = contexts(config(MXFP8, t, pipeline, inference=False, wgrad_dtype=torch.float32))
        monkeypatch.delenv("DMOE_MXFP8_FPROP_PER32", raising=False)
        p13, p2 = torch.nn.Parameter(w13.clone()), torch.nn.Parameter(w2.clone())
        p13.grad_dtype = p2.grad_dtype = torch.float32
        p13.grad, p2.grad = start[0].clone(), start[1].clone()
        storage = (p13.grad.data_ptr(), p2.grad.data_ptr())
        pw13, pw2 = prepare_pair(p13, p2)
        for x, ids, s, g in cases:
            xs, ss = x.clone().requires_grad_(), s.clone().requires_grad_()
            dist_moe.routed_experts(xs, ids, ss, pw13, pw2, ctx, options=opts).backward(g)
        assert (p13.grad.data_ptr(), p2.grad.data_ptr()) == storage, pipeline
        assert not torch.equal(p13.grad, start[0])
        assert_planner_reset(ctx)
        grads[pipeline] = (p13.grad, p2.grad)
    for name, a, b in zip(("grad_w13", "grad_w2"), grads["mega"], grads["staged"]):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=lambda m, n=name: f"{n}: mega vs staged: {m}")


def test_mega_training_is_traceable_and_graphable(contexts):
    """A Mega MXFP8 training call under make_fx is one block_scaled_forward that saves (traced ==
    eager bitwise); under make_graphed_callables the output and all four gradients equal eager's
    bitwise on two different cases."""
    from torch.fx.experimental.proxy_tensor import make_fx

    t = 256
    ctx = contexts(config(MXFP8, t, "mega", inference=False))
    w13, w2 = make_weights(E, D, FF, seed=79, device=DEV)
    p13, p2 = torch.nn.Parameter(w13.clone()), torch.nn.Parameter(w2.clone())
    pw = prepare_pair(p13, p2)

    def call(x, ids, scores):
        return dist_moe.routed_experts(x, ids, scores, *pw, ctx)

    def fn(x, ids, scores, w13, w2):  # pw's sources, inputs of the graphed callable (their grads)
        return call(x, ids, scores)

    x0, ids0, s0 = make_tokens(t, D, K, seed=179, device=DEV, ids=upstream_case_ids(t, K, E))
    xs = x0.clone().requires_grad_()
    gm = make_fx(call)(xs, ids0, s0)
    fwd = [n for n in gm.graph.nodes if n.target == torch.ops.dist_moe.block_scaled_forward.default]
    assert len(fwd) == 1 and fwd[0].args[22] is True, gm.graph
    ctx.reset()
    traced = gm(xs, ids0, s0)
    ctx.reset()
    torch.testing.assert_close(traced, call(xs, ids0, s0), rtol=0, atol=0)
    ctx.reset()

    graphed = torch.cuda.make_graphed_callables(
        fn, (x0.clone().requires_grad_(), ids0, s0.clone().requires_grad_(), p13, p2), num_warmup_iters=1,
        allow_unused_input=True)
    for case_index in range(2):
        x, ids, s = make_tokens(t, D, K, seed=180 + case_index, device=DEV,
                                ids=upstream_case_ids(t, K, E, shift=case_index + 1))
        g = torch.randn(t, D, generator=torch.Generator().manual_seed(280 + case_index)).to(torch.bfloat16).to(DEV)
        results = []
        for f in (fn, graphed):
            p13.grad = p2.grad = None
            xi, si = x.clone().requires_grad_(), s.clone().requires_grad_()
            out = f(xi, ids, si, p13, p2)
            out.backward(g)
            results.append((out.detach().clone(), xi.grad.clone(), si.grad.clone(), p13.grad.clone(), p2.grad.clone()))
        for name, a, b in zip(("out", "grad_x", "grad_scores", "grad_w13", "grad_w2"), *results):
            torch.testing.assert_close(b, a, rtol=0, atol=0,
                                       msg=lambda m, n=name, c=case_index: f"case {c} {n}: graphed vs eager: {m}")
    assert_planner_reset(ctx)


def test_mega_refusals(world1):
    """What Mega does not run on Hopper yet raises the C++ context's ValueError: NVFP4 past decode
    sizes, FP8 blockwise."""

    def create(cfg):
        dist_moe.create_context(group=world1, config=cfg, device=DEV).close()

    with pytest.raises(ValueError, match="runs NVFP4 at decode sizes on Hopper so far"):
        create(config(NVFP4, 128, "mega"))
    with pytest.raises(ValueError, match="pipeline='mega' has no Hopper execution yet for fp8_blockwise"):
        create(config(dist_moe.BlockScaledFormat.FP8_BLOCKWISE, 128, "mega"))
