"""Activation checkpointing, the activation buffer's introspection and the registered op names, at
world size 1 (issue: upstream's public contract).

Checkpointing is tested as training stacks use it: plain non-reentrant ``torch.utils.checkpoint``
around one layer with one layer per slot (upstream's default sizing), L checkpointed layers in one
slot of L over many steps, checkpointed and plain layers mixed, selective checkpointing, and a small
MoE language model trained for many optimizer steps with per-block checkpointing and evaluation
between steps. Every case is bitwise equal to the same computation without checkpointing, and the
planner is empty after every backward (no ``reset()``).
"""

import os
import subprocess
import sys

import pytest
import torch
import torch.utils.checkpoint as ckpt
from moe_reference import (
    assert_planner_reset,
    leaves,
    make_tokens,
    make_weights,
    single_rank_config,
    upstream_case_ids,
)

import dist_moe

T, D, FF, E, K = 8, 256, 256, 4, 2
DEV = torch.device("cuda", 0)
HERE = os.path.dirname(__file__)


@pytest.fixture
def make_ctx(contexts):
    return lambda **kw: contexts(single_rank_config(T, D, FF, K, E, **kw))


def case(seed, shift=0):
    x, ids, scores = make_tokens(T, D, K, seed=seed, device=DEV, ids=upstream_case_ids(T, K, E, shift=shift))
    return x, ids, scores


def assert_bitwise(a, b, names):
    for name, u, v in zip(names, a, b):
        torch.testing.assert_close(u, v, rtol=0, atol=0, msg=lambda m, n=name: f"{n}: {m}")


# ---- one layer ---------------------------------------------------------------------------------------------


def test_checkpoint_with_one_layer_per_slot_matches_eager_bitwise(make_ctx):
    """Upstream's test_clip_statistics_survive_activation_checkpointing, with its default sizing (one
    layer per slot): output, gradients and clip counters equal eager bitwise, three times in a row,
    and the slot is empty after each backward."""
    ctx = make_ctx()
    w13, w2 = make_weights(E, D, FF, seed=70, device=DEV)
    for step in range(3):
        x, ids, scores = case(seed=71 + step, shift=step)
        g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
        runs = []
        for checkpointed in (False, True):
            stats = torch.full((3,), -1.0, device=DEV)
            opts = dist_moe.ExecutionOptions(swiglu_clip_stats_out_3=stats, swiglu_clip_limit=0.25)

            def fn(x, scores, w13, w2):
                return dist_moe.routed_experts(x, ids, scores, w13, w2, ctx, options=opts)

            xs, ss, a, b = leaves(x, scores, w13, w2)
            out = ckpt.checkpoint(fn, xs, ss, a, b, use_reentrant=False) if checkpointed else fn(xs, ss, a, b)
            # The checkpoint's forward keeps nothing in the slot; a plain forward holds its layer.
            assert ctx.activation_buffer.moe_layer_id.tolist() == [0 if checkpointed else 1]
            out.backward(g)
            runs.append((out.detach(), xs.grad, ss.grad, a.grad, b.grad, stats.clone()))
            assert_planner_reset(ctx)
        assert runs[0][5][2].item() == T * K * FF
        assert_bitwise(runs[0], runs[1], ("out", "x", "scores", "w13", "w2", "clip stats"))


@pytest.mark.parametrize("policy_for_layer", ["MUST_SAVE", "PREFER_RECOMPUTE"])
def test_selective_checkpointing_matches_eager_bitwise(make_ctx, policy_for_layer):
    """Selective checkpointing: the layer's forward op saved (upstream's guide: the forward runs once,
    its state is popped) or recomputed (it runs again; the first run took no slot space). Either way
    bitwise == eager and the slot is empty afterwards."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    ctx = make_ctx()
    x, ids, scores = case(seed=75)
    w13, w2 = make_weights(E, D, FF, seed=76, device=DEV)
    g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
    layer_ops = (torch.ops.dist_moe.bf16_forward.default, torch.ops.dist_moe.bf16_forward_with_clip_stats.default)
    ran = []

    def policy(_ctx, op, *args, **kwargs):
        if op in layer_ops:
            return getattr(CheckpointPolicy, policy_for_layer)
        return CheckpointPolicy.PREFER_RECOMPUTE

    def fn(x, scores, w13, w2):
        ran.append(1)
        return dist_moe.routed_experts(x, ids, scores, w13, w2, ctx)

    xs, ss, a, b = leaves(x, scores, w13, w2)
    eager_out = fn(xs, ss, a, b)
    eager_out.backward(g)
    eager = (eager_out.detach(), xs.grad, ss.grad, a.grad, b.grad)
    xs, ss, a, b = leaves(x, scores, w13, w2)
    out = ckpt.checkpoint(fn, xs, ss, a, b, use_reentrant=False,
                          context_fn=lambda: create_selective_checkpoint_contexts(policy))
    # A saved (cached) forward op holds its layer in the slot until backward; a recomputed one does not.
    assert ctx.activation_buffer.moe_layer_id.tolist() == [1 if policy_for_layer == "MUST_SAVE" else 0]
    out.backward(g)
    assert len(ran) == 3  # eager, forward, recompute
    assert_bitwise(eager, (out.detach(), xs.grad, ss.grad, a.grad, b.grad), ("out", "x", "scores", "w13", "w2"))
    assert_planner_reset(ctx)


# ---- L layers in one slot, many steps ------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", ["all", "mixed"])
def test_checkpointed_layers_in_one_slot_over_many_steps(make_ctx, pattern):
    """A residual chain of L=4 layers in one slot of 4 (balanced full-save budget), every layer (or
    every other one) under non-reentrant checkpointing, eight steps with no reset and a no-grad
    evaluation between steps: each step bitwise == the chain without checkpointing, the slot empty
    after each backward."""
    L = 4
    ctx = make_ctx(max_moe_layers_per_activation_slot=L)
    ctx.select_activation_slot(0, L)
    weights = [make_weights(E, D, FF, seed=200 + i, device=DEV) for i in range(L)]
    checkpointed = [pattern == "all" or i % 2 == 0 for i in range(L)]

    def chain(h, scores, params, ids, use_ckpt):
        for i in range(L):
            w13, w2 = params[2 * i], params[2 * i + 1]

            def layer(h, scores, w13, w2):
                return h + dist_moe.routed_experts(h, ids, scores, w13, w2, ctx)

            h = ckpt.checkpoint(layer, h, scores, w13, w2, use_reentrant=False) if use_ckpt[i] else layer(
                h, scores, w13, w2)
        return h

    for step in range(8):
        x, ids, scores = case(seed=300 + step, shift=step % E)
        x = x * 0.5
        g = torch.randn(T, D, device=DEV, dtype=torch.bfloat16)
        runs = []
        for use_ckpt in ([False] * L, checkpointed):
            flat = [w for pair in weights for w in pair]
            xs, ss, *params = leaves(x, scores, *flat)
            out = chain(xs, ss, params, ids, use_ckpt)
            out.backward(g)
            runs.append([out.detach(), xs.grad, ss.grad] + [p.grad for p in params])
            assert_planner_reset(ctx)
        names = ["out", "x", "scores"] + [f"layer{i // 2}.{('w13', 'w2')[i % 2]}" for i in range(2 * L)]
        assert_bitwise(runs[0], runs[1], names)
        with torch.no_grad():  # evaluation between steps: scratch-only, equals the training output
            flat = [w for pair in weights for w in pair]
            ev = chain(x, scores, flat, ids, [False] * L)
        torch.testing.assert_close(ev, runs[0][0], rtol=0, atol=0)
        assert_planner_reset(ctx)


# ---- a small MoE language model, trained ---------------------------------------------------------------------


class MoEBlock(torch.nn.Module):
    """Pre-norm residual MoE block: router (linear, softmax, top-k) and Dist-MoE's routed experts."""

    def __init__(self, ctx, seed):
        super().__init__()
        self.ctx = ctx
        g = torch.Generator().manual_seed(seed)
        self.norm = torch.nn.RMSNorm(D, eps=1e-6, dtype=torch.bfloat16)
        self.router = torch.nn.Linear(D, E, bias=False, dtype=torch.bfloat16)
        with torch.no_grad():
            self.router.weight.copy_(torch.randn(E, D, generator=g) * D**-0.5)
        w13, w2 = make_weights(E, D, FF, seed=seed + 1, device="cpu")
        self.w13 = torch.nn.Parameter(w13)
        self.w2 = torch.nn.Parameter(w2)

    def forward(self, h):
        y = self.norm(h)
        probs = torch.softmax(self.router(y).float(), dim=-1)
        scores, ids = probs.topk(K, dim=-1)
        scores = scores / scores.sum(-1, keepdim=True)
        return h + dist_moe.routed_experts(y, ids.to(torch.int32), scores, self.w13, self.w2, self.ctx)


class TinyMoELM(torch.nn.Module):
    def __init__(self, ctx, blocks, vocab, checkpoint_blocks):
        super().__init__()
        torch.manual_seed(5)
        self.embed = torch.nn.Embedding(vocab, D, dtype=torch.bfloat16)
        self.blocks = torch.nn.ModuleList(MoEBlock(ctx, 1000 + 10 * i) for i in range(blocks))
        self.head = torch.nn.Linear(D, vocab, bias=False, dtype=torch.bfloat16)
        self.checkpoint_blocks = checkpoint_blocks

    def forward(self, tokens):
        h = self.embed(tokens)
        for block in self.blocks:
            h = ckpt.checkpoint(block, h, use_reentrant=False) if self.checkpoint_blocks else block(h)
        return self.head(h).float()


def test_moe_language_model_trains_with_per_block_checkpointing(make_ctx):
    """A 4-block MoE LM (one slot holding its 4 layers) trained for 20 AdamW steps with per-block
    non-reentrant checkpointing, evaluated under no-grad every 5 steps: every loss, the evaluation
    losses and the final parameters equal the same model trained without checkpointing bitwise; the
    loss falls; the slot is empty after every step."""
    blocks, vocab, steps = 4, 64, 20
    ctx = make_ctx(max_moe_layers_per_activation_slot=blocks)
    models = [TinyMoELM(ctx, blocks, vocab, checkpoint_blocks=c).to(DEV) for c in (False, True)]
    models[1].load_state_dict(models[0].state_dict())
    opts = [torch.optim.AdamW(m.parameters(), lr=3e-3) for m in models]
    gen = torch.Generator().manual_seed(9)
    tokens = torch.randint(0, vocab, (T + 1,), generator=gen).to(DEV)  # one sequence, learned by heart
    eval_tokens = torch.randint(0, vocab, (T + 1,), generator=gen).to(DEV)
    losses = [[], []]
    eval_losses = [[], []]
    for step in range(steps):
        for i, (m, opt) in enumerate(zip(models, opts)):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(m(tokens[:-1]), tokens[1:])
            loss.backward()
            opt.step()
            losses[i].append(loss.detach())
            assert_planner_reset(ctx)
            if step % 5 == 4:
                with torch.no_grad():
                    ev = torch.nn.functional.cross_entropy(m(eval_tokens[:-1]), eval_tokens[1:])
                eval_losses[i].append(ev)
    for a, b in zip(losses[0], losses[1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for a, b in zip(eval_losses[0], eval_losses[1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for (name, p), q in zip(models[0].named_parameters(), models[1].parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=lambda m, n=name: f"{n}: {m}")
    first, last = losses[0][0].item(), torch.stack(losses[0][-5:]).mean().item()
    assert last < first, (first, last)


# ---- a real slot overflow --------------------------------------------------------------------------------------


def test_slot_overflow_ends_in_its_diagnostic():
    """Two training forwards in a one-layer slot with no backward between them (a slot too small for
    even the second layer's x save): the planner's diagnostic line names the slot and its bytes, the
    process ends non-zero, and no illegal memory access happens."""
    proc = subprocess.run([sys.executable, os.path.join(HERE, "slot_overflow_worker.py")], capture_output=True,
                          text=True, timeout=300)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-3000:]
    assert "EXPECTED_SLOT_OVERFLOW" in text, text[-3000:]
    assert "OOM: activation slot overflow" in text and "num_moe_layers_in_slot=1" in text, text[-3000:]
    assert "illegal memory access" not in text, text[-3000:]


# ---- Context.activation_buffer ----------------------------------------------------------------------------------


def A(n):
    return (n + 127) // 128 * 128


def test_activation_buffer_reports_the_planner_state(make_ctx):
    """Upstream's ActivationBuffer fields against the planner's known values: after a forward on slot 1
    (minimum slot: the x save, A(T*D*2); balanced full-save slot: x_gathered, h1 and h3), after its
    backward, and after reset(); check_overflow() reports the scratch used."""
    for factor, saved in ((None, A(T * D * 2)), (1.0, A(T * K * D * 2) + A(T * K * 2 * FF * 2) + A(T * K * D * 2))):
        ctx = make_ctx(num_activation_slots=2, activation_slot_capacity_factor=factor)
        ab = ctx.activation_buffer
        plan = ctx.memory_plan
        N, S = 2, plan.activation_slot_bytes
        assert ab.num_activation_slots == N and ab.activation_slot_bytes == S
        assert ab.buffer.data_ptr() == ctx.activation_storage.data_ptr()
        initial = ab.initial_buffer_offsets.tolist()
        assert initial[:N] == [0, S] and initial[N] == ab.buffer.numel()
        assert ab.device_scratch_size == plan.device_scratch_bytes and ab.host_scratch_size == 0
        ctx.select_activation_slot(1, 1)
        assert ab.activation_slot_id_1.tolist() == [1]
        x, ids, scores = case(seed=91)
        w13, w2 = make_weights(E, D, FF, seed=92, device=DEV)
        xs, ss = leaves(x, scores)
        out = dist_moe.routed_experts(xs, ids, ss, w13, w2, ctx)
        assert ab.moe_layer_id.tolist() == [0, 1]
        assert ab.saved_activation_bytes_per_rank.tolist() == [0, saved]
        assert ab.buffer_offsets.tolist() == [0, S + saved, initial[N]]
        ctx.select_activation_slot(0, 1)  # the backward pops the forward's slot regardless
        out.backward(torch.ones_like(out))
        assert ab.buffer_offsets.tolist() == initial
        assert ab.moe_layer_id.tolist() == [0, 0]
        assert ab.saved_activation_bytes_per_rank.tolist() == [0, 0]
        info = ab.check_overflow()
        assert info.scratch_size == initial[N] - N * S
        assert 0 < info.scratch_max_used <= info.scratch_size
        assert info.scratch_min_free == info.scratch_size - info.scratch_max_used
        assert info.device_scratch_size == plan.device_scratch_bytes and info.host_scratch_size is None
        assert ab.peak_min_free_space.tolist()[1] == S - saved  # slot 1's lowest free bytes
        out = dist_moe.routed_experts(*leaves(x), ids, scores, w13, w2, ctx)  # pushed to slot 0 ...
        assert ab.moe_layer_id.tolist() == [1, 0]
        ctx.reset()  # ... and dropped by reset(): an aborted schedule
        assert ab.buffer_offsets.tolist() == initial and ab.moe_layer_id.tolist() == [0, 0]
        assert ab.peak_min_free_space.tolist() == [S, S, initial[N] - N * S]
        del out


# ---- op names -------------------------------------------------------------------------------------------------------


def test_traced_training_ops_carry_upstreams_names(make_ctx):
    """make_fx of a training call: one bf16_forward (18 arguments) without clip statistics, one
    bf16_forward_with_clip_stats (19 arguments, upstream's count) and a graph-visible aten.copy_
    with them; neither schema mutates."""
    from torch.fx.experimental.proxy_tensor import make_fx

    ctx = make_ctx()
    x, ids, scores = case(seed=95)
    w13, w2 = make_weights(E, D, FF, seed=96, device=DEV)
    stats = torch.zeros(3, device=DEV)
    for with_stats, op, nargs in ((False, torch.ops.dist_moe.bf16_forward.default, 18),
                                  (True, torch.ops.dist_moe.bf16_forward_with_clip_stats.default, 19)):
        opts = dist_moe.ExecutionOptions(swiglu_clip_stats_out_3=stats if with_stats else None)

        def fn(x, scores):
            return dist_moe.routed_experts(x, ids, scores, w13, w2, ctx, options=opts)

        gm = make_fx(fn)(*leaves(x, scores))
        nodes = [n for n in gm.graph.nodes if n.op == "call_function" and n.target == op]
        assert len(nodes) == 1 and len(nodes[0].args) == nargs, gm.graph
        assert (torch.ops.aten.copy_.default in [n.target for n in gm.graph.nodes]) == with_stats
        assert "!" not in str(op._schema)
        ctx.reset()
    assert "float swiglu_clip_limit" in str(torch.ops.dist_moe.bf16_forward_with_clip_stats.default._schema)


def test_ops_are_registered_by_import_without_initializing_cuda():
    """`import dist_moe` registers every torch.ops.dist_moe op (upstream's exist right after import)
    and initializes no CUDA context."""
    code = (
        "import torch, dist_moe\n"
        "names = ['bf16', 'bf16_forward', 'bf16_forward_with_clip_stats', 'bf16_backward', 'bf16_backward_accumulate_',\n"
        "         'block_scaled_forward', 'block_scaled_backward', 'block_scaled_backward_accumulate_']\n"
        "assert all(hasattr(torch.ops.dist_moe, n) and getattr(torch.ops.dist_moe, n).default for n in names)\n"
        "assert not torch.cuda.is_initialized(), 'import initialized CUDA'\n"
        "print('REGISTERED_OK')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "REGISTERED_OK" in proc.stdout, proc.stdout + proc.stderr
