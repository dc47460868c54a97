"""Two-rank (or N-rank) worker of the torch suites: every case of upstream's DistMoeTwoRankTest that
applies to BF16, run in one process group so NCCL and context setup are paid once.

    python tests/torch/two_rank_worker.py --out DIR [--ranks 2] [--cases a,b]   # numerics cases
    python tests/torch/two_rank_worker.py --trap unequal_t|overflow|bad_id      # must trap
    python tests/torch/two_rank_worker.py --out DIR --ranks R --emulate RANK      # one GPU, fake peers

Each rank writes DIR/rank<r>.json: {case: "ok" | "FAIL: message"}. Collective work of a case finishes
on every rank before its checks run, so a failed check on one rank cannot strand the other.
Numerics harness (upstream's ``_run_two_rank_numerics``): T=128, D=F=1024, E=4, K=2, routes
(g % 4, (g + 2) % 4) for global token g (every token crosses ranks), x seeded 1000+rank, global
weights seeded 2027; the reference runs on the global batch on every rank.

With ``--emulate RANK`` one process runs rank RANK of R on GPU 0 over a fake process group, so the
context emulates its peers (``emulate_peer_buffers``): every virtual peer reads this rank's windows,
i.e. holds this rank's tokens, and the routes other ranks' experts own come back as zeros. The
harness then gives every rank this rank's inputs, and its reference disables the routes to other
ranks' experts: the same cases check an EP-size-R rank's kernels on one GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(__file__))
from moe_reference import (  # noqa: E402
    FWD_TOL,
    MXFP8_FWD_TOL,
    OpCalls,
    assert_aggregate_close,
    assert_hooks_fired_once_per_backward,
    assert_moe_close,
    assert_mxfp8_train_close,
    assert_planner_reset,
    assert_train_close,
    reference_moe,
)

import dist_moe  # noqa: E402

T, D, FF, E, K = 128, 1024, 1024, 4, 2
EMULATED = False  # --emulate: this process is the only real rank (see the module docstring)


class Harness:
    def __init__(self, rank, world, device, *, T=T, E=E, K=K, T_max=None, ids_fn=None, seed=0):
        self.rank, self.world, self.device = rank, world, device
        self.T, self.E, self.K, self.L = T, E, K, E // world
        self.T_max = T_max or T
        g = torch.Generator().manual_seed(2027 + seed)
        w13 = (torch.randn(E, 2 * FF, D, generator=g) * D**-0.5).to(torch.bfloat16)
        w2 = (torch.randn(E, D, FF, generator=g) * FF**-0.5).to(torch.bfloat16)
        self.w13_global, self.w2_global = w13.to(device), w2.to(device)
        self.xs, self.ids, self.scores, self.grads = [], [], [], []
        for r in range(world):  # every rank's inputs, generated identically everywhere
            gr = torch.Generator().manual_seed(1000 + r + 100 * seed)
            gtok = torch.arange(r * T, (r + 1) * T).unsqueeze(1)
            ids = ids_fn(r, gtok) if ids_fn else torch.cat([gtok % E, (gtok + 2) % E], dim=1)[:, :K]
            raw = torch.rand(T, K, generator=gr) + 0.1
            scores = raw / raw.sum(-1, keepdim=True)
            scores = torch.where(ids >= 0, scores, torch.zeros_like(scores))
            self.xs.append(torch.randn(T, D, generator=gr).to(torch.bfloat16).to(device))
            self.ids.append(ids.to(torch.int32).to(device))
            self.scores.append(scores.to(device))
            self.grads.append(torch.randn(T, D, generator=gr).to(torch.bfloat16).to(device))
        if EMULATED:  # every virtual peer reads this rank's published tokens
            for inputs in (self.xs, self.ids, self.scores, self.grads):
                inputs[:] = [inputs[rank]] * world

    def local_weights(self):
        s = slice(self.rank * self.L, (self.rank + 1) * self.L)
        return self.w13_global[s].clone(), self.w2_global[s].clone()

    def config(self, **kw):
        base = dict(max_num_local_input_tokens=self.T_max, hidden_dim=D, intermediate_dim=FF, top_k=self.K,
                    num_experts=self.E, max_moe_layers_per_activation_slot=2, device_scratch_capacity_factor=1.0,
                    activation_slot_capacity_factor=0.0)
        base.update(kw)
        if base.get("inference"):
            base.update(num_activation_slots=0, activation_slot_capacity_factor=None)
        return dist_moe.Config(**base)

    def reference(self, **kw):
        """Global reference forward+backward; returns this rank's slices."""
        x = torch.cat(self.xs).requires_grad_()
        s = torch.cat(self.scores).requires_grad_()
        w13 = self.w13_global.clone().requires_grad_()
        w2 = self.w2_global.clone().requires_grad_()
        ids = torch.cat(self.ids)
        if EMULATED:  # absent ranks compute nothing: their experts' routes are zeros here
            ids = torch.where((ids >= 0) & (ids // self.L != self.rank), torch.full_like(ids, -1), ids)
        out = reference_moe(x, ids, s, w13, w2, **kw)
        out.backward(torch.cat(self.grads))
        rows = slice(self.rank * self.T, (self.rank + 1) * self.T)
        exp = slice(self.rank * self.L, (self.rank + 1) * self.L)
        grads = [torch.zeros_like(t) if t.grad is None else t.grad for t in (x, s, w13, w2)]  # no route: no graph
        return out.detach()[rows], grads[0][rows], grads[1][rows], grads[2][exp], grads[3][exp]

    def run(self, ctx, w13, w2, options=None):
        """One step; prepared weights report their sources' gradients."""
        r = self.rank
        x = self.xs[r].clone().requires_grad_()
        s = self.scores[r].clone().requires_grad_()
        out = dist_moe.routed_experts(x, self.ids[r], s, w13, w2, ctx, options=options)
        out.backward(self.grads[r])
        g13, g2 = (w.source.grad if isinstance(w, dist_moe.PreparedWeight) else w.grad for w in (w13, w2))
        return out.detach(), x.grad, s.grad, g13, g2


def leaf(t):
    return t.clone().requires_grad_()


# ---- cases: each returns a list of deferred checks (run after the collective work) -----------------


def case_peer_paths(rank, world, dev, group):
    h = Harness(rank, world, dev)
    ctx = dist_moe.create_context(group=group, config=h.config(wgrad_dtype=torch.float32), device=dev)
    w13, w2 = (leaf(w) for w in h.local_weights())
    first = h.run(ctx, w13, w2)
    w13b, w2b = (leaf(w) for w in h.local_weights())
    second = h.run(ctx, w13b, w2b)
    ctx_ok = ctx.planner_snapshot()
    ctx.close()
    want = h.reference()
    assert_train_close(first, want)
    for a, b in zip(first, second):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # a repeated step is bitwise identical
    assert all(v == 0 for v in ctx_ok["layer_ids"])


def case_bounded_token_shape(rank, world, dev, group):
    h = Harness(rank, world, dev, T_max=2 * T)
    ctx = dist_moe.create_context(group=group, config=h.config(), device=dev)
    got = h.run(ctx, *(leaf(w) for w in h.local_weights()))
    ctx.close()
    assert_train_close(got, h.reference())


def case_fully_padded_rank(rank, world, dev, group):
    pad = world - 1

    def ids_fn(r, gtok):
        ids = torch.cat([gtok % E, (gtok + 2) % E], dim=1)
        return torch.full_like(ids, -1) if r == pad else ids

    h = Harness(rank, world, dev, ids_fn=ids_fn)
    ctx = dist_moe.create_context(group=group, config=h.config(), device=dev)
    got = h.run(ctx, *(leaf(w) for w in h.local_weights()))
    ctx.close()
    assert_train_close(got, h.reference())
    if rank == pad:
        assert got[0].abs().max() == 0 and got[1].abs().max() == 0 and got[2].abs().max() == 0


def case_clip_statistics(rank, world, dev, group):
    h = Harness(rank, world, dev)
    ctx = dist_moe.create_context(group=group, config=h.config(), device=dev)
    stats = torch.full((3,), -1.0, device=dev)
    opts = dist_moe.ExecutionOptions(swiglu_clip_stats_out_3=stats, swiglu_clip_limit=0.25)
    got = h.run(ctx, *(leaf(w) for w in h.local_weights()), options=opts)
    ctx.close()
    assert_train_close(got, h.reference())
    lo, hi = rank * h.L, (rank + 1) * h.L
    received = sum(int(((i >= lo) & (i < hi)).sum()) for i in h.ids)
    assert stats[2].item() == received * FF, (stats, received)  # 128*2*1024 = 262144 at EP2
    assert 0 < stats[0].item() <= stats[2].item() and 0 < stats[1].item() <= stats[2].item(), stats


def case_flat_weights(rank, world, dev, group):
    h = Harness(rank, world, dev)
    ctx = dist_moe.create_context(group=group, config=h.config(), device=dev)
    w13, w2 = h.local_weights()
    w13f, w2f = leaf(w13.reshape(-1, D)), leaf(w2.reshape(-1, FF))
    got = h.run(ctx, w13f, w2f)
    ctx.close()
    assert got[3].shape == w13f.shape and got[4].shape == w2f.shape
    assert_train_close(got, h.reference())


def _accumulate(rank, world, dev, group, grad_dtype):
    h = Harness(rank, world, dev)
    ctx = dist_moe.create_context(group=group, config=h.config(), device=dev)
    w13, w2 = h.local_weights()
    p13 = torch.nn.Parameter(w13.reshape(-1, D).clone())  # flattened parameters, 3D compute views
    p2 = torch.nn.Parameter(w2.reshape(-1, FF).clone())
    if grad_dtype == torch.float32:
        p13.grad_dtype = p2.grad_dtype = torch.float32
    fired = []
    for p in (p13, p2):
        p.register_post_accumulate_grad_hook(lambda p: fired.append(p))
    opts = dist_moe.ExecutionOptions(inplace_wgrad_accum=True)
    first = h.run(ctx, p13.view(h.L, 2 * FF, D), p2.view(h.L, D, FF), options=opts)
    assert_hooks_fired_once_per_backward(fired, p13, p2, 0)
    g13_first, g2_first = p13.grad.clone(), p2.grad.clone()
    ptrs = (p13.grad.data_ptr(), p2.grad.data_ptr())
    with OpCalls(torch.ops.dist_moe.bf16_backward_accumulate_.default) as calls:
        h.run(ctx, p13.view(h.L, 2 * FF, D), p2.view(h.L, D, FF), options=opts)
    ctx.close()
    assert len(calls.args) == 1, f"{len(calls.args)} accumulate calls in the second step, want exactly one"
    assert (calls.args[0][3].data_ptr(), calls.args[0][4].data_ptr()) == ptrs, "the op adds into .grad itself"
    assert_hooks_fired_once_per_backward(fired, p13, p2, 1)
    want = h.reference()
    assert_train_close((first[0], first[1], first[2], g13_first, g2_first), want)
    assert p13.grad.dtype == grad_dtype and p2.grad.dtype == grad_dtype
    assert (p13.grad.data_ptr(), p2.grad.data_ptr()) == ptrs, "accumulation must keep the .grad storages"
    torch.testing.assert_close(p13.grad.float(), 2 * g13_first.float(), rtol=5e-2, atol=2e-2)
    torch.testing.assert_close(p2.grad.float(), 2 * g2_first.float(), rtol=5e-2, atol=2e-2)


def case_accumulate_bf16(rank, world, dev, group):
    _accumulate(rank, world, dev, group, torch.bfloat16)


def case_accumulate_fp32(rank, world, dev, group):
    if not hasattr(torch.Tensor, "grad_dtype"):
        return  # FP32 .grad of BF16 parameters needs Tensor.grad_dtype
    _accumulate(rank, world, dev, group, torch.float32)


def rmsnorm_post():
    """Upstream's RMSNorm postprocess of test_post_expert_rmsnorm_exercises_peer_paths (no weight)."""
    return dist_moe.RMSNormPostprocess(eps=1e-6, norm_output_dtype=torch.float32, output_dtype=torch.bfloat16,
                                       require_bitwise=False, recompute_rstd=True)


def case_post_expert_rmsnorm(rank, world, dev, group):
    h = Harness(rank, world, dev)
    ctx = dist_moe.create_context(group=group, config=h.config(), device=dev)
    got = h.run(ctx, *(leaf(w) for w in h.local_weights()),
                options=dist_moe.ExecutionOptions(experts_output_postprocess=rmsnorm_post()))
    ctx.close()
    assert_train_close(got, h.reference(rmsnorm_eps=1e-6))


def case_post_expert_rmsnorm_accumulate(rank, world, dev, group):
    """The RMSNorm postprocess with the WGRADs added in place into the parameters' .grad (upstream's
    BF16 + accumulate variant): the first step within the reference, the second doubles it."""
    h = Harness(rank, world, dev)
    ctx = dist_moe.create_context(group=group, config=h.config(), device=dev)
    p13, p2 = (torch.nn.Parameter(w.clone()) for w in h.local_weights())
    opts = dist_moe.ExecutionOptions(experts_output_postprocess=rmsnorm_post(), inplace_wgrad_accum=True)
    first = h.run(ctx, p13, p2, options=opts)
    g13_first, g2_first = p13.grad.clone(), p2.grad.clone()  # the second step adds into p13.grad itself
    h.run(ctx, p13, p2, options=opts)
    ctx.close()
    assert_train_close((first[0], first[1], first[2], g13_first, g2_first), h.reference(rmsnorm_eps=1e-6))
    torch.testing.assert_close(p13.grad.float(), 2 * g13_first.float(), rtol=5e-2, atol=2e-2)
    torch.testing.assert_close(p2.grad.float(), 2 * g2_first.float(), rtol=5e-2, atol=2e-2)


def case_clamped_swiglu(rank, world, dev, group):
    h = Harness(rank, world, dev)
    h.xs = [x * 4 for x in h.xs]  # push h1 past the limit
    ctx = dist_moe.create_context(group=group, config=h.config(activation="swiglu_clamped", swiglu_alpha=1.5,
                                                                swiglu_limit=5.0), device=dev)
    got = h.run(ctx, *(leaf(w) for w in h.local_weights()))
    ctx.close()
    assert_train_close(got, h.reference(activation="swiglu_clamped", alpha=1.5, limit=5.0))


def case_k6_e8(rank, world, dev, group):
    def ids_fn(r, gtok):
        g = torch.Generator().manual_seed(77 + r)
        return torch.stack([torch.randperm(8, generator=g)[:6] for _ in range(gtok.shape[0])])

    h = Harness(rank, world, dev, E=8, K=6, ids_fn=ids_fn)
    # Random routes may send a rank more than T*K rows: plan for the topology maximum.
    ctx = dist_moe.create_context(group=group, config=h.config(device_scratch_capacity_factor=float(world)),
                                  device=dev)
    got = h.run(ctx, *(leaf(w) for w in h.local_weights()))
    ctx.close()
    assert_train_close(got, h.reference())


def case_inference(rank, world, dev, group):
    h = Harness(rank, world, dev)
    ctx = dist_moe.create_context(group=group, config=h.config(inference=True), device=dev)
    w13, w2 = h.local_weights()
    out = dist_moe.routed_experts(h.xs[rank], h.ids[rank], h.scores[rank], w13, w2, ctx)
    ctx.close()
    assert_moe_close(out, h.reference()[0], name="out", **FWD_TOL)


def case_no_grad_is_scratch_only(rank, world, dev, group):
    h = Harness(rank, world, dev)
    ctx = dist_moe.create_context(group=group, config=h.config(), device=dev)
    w13, w2 = h.local_weights()
    before = ctx.planner_snapshot()
    with torch.no_grad():
        evaluated = dist_moe.routed_experts(h.xs[rank], h.ids[rank], h.scores[rank], w13, w2, ctx)
    after = ctx.planner_snapshot()
    got = h.run(ctx, leaf(w13), leaf(w2))
    ctx.close()
    assert before == after, (before, after)
    torch.testing.assert_close(evaluated, got[0], rtol=0, atol=0)
    assert_train_close(got, h.reference())


def case_min_slot_recompute_equals_full_save(rank, world, dev, group, block_scaled=None):
    """Two chained layers sharing a slot: minimum slot (recompute) vs maximum useful (saved) bitwise
    (block-scaled: prepared weights, WGRAD to their sources)."""
    h = Harness(rank, world, dev)
    results = []
    for factor in (0.0, None):
        kw = dict(activation_slot_capacity_factor=factor, block_scaled=block_scaled)
        if factor is None:
            plan = dist_moe.plan_memory(h.config(block_scaled=block_scaled), world)
            kw["activation_slot_bytes"] = plan.maximum_useful_activation_slot_bytes
        ctx = dist_moe.create_context(group=group, config=h.config(**kw), device=dev)
        (a13, a2), (b13, b2) = h.local_weights(), h.local_weights()
        ws = [leaf(a13), leaf(a2), leaf(b13 * 0.5), leaf(b2)]
        layer = ws if block_scaled is None else [dist_moe.prepare_block_scaled_weight(w, block_scaled) for w in ws]
        x = h.xs[rank].clone().requires_grad_()
        s = h.scores[rank].clone().requires_grad_()
        ids = h.ids[rank]
        y = x + dist_moe.routed_experts(x, ids, s, layer[0], layer[1], ctx)
        z = y + dist_moe.routed_experts(y, ids, s, layer[2], layer[3], ctx)
        z.backward(h.grads[rank])
        assert_planner_reset(ctx)
        ctx.close()
        results.append([z.detach(), x.grad, s.grad] + [w.grad for w in ws])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def case_expert_and_wgrad_postprocess(rank, world, dev, group):
    """Identity weights_preprocess_fn (recorded: 2 forward + 2 backward calls), postprocess x0.5, a WGRAD
    hook: hooks see w2 then w13."""
    h = Harness(rank, world, dev)
    ctx = dist_moe.create_context(group=group, config=h.config(), device=dev)
    pre, post = [], []

    def preprocess(w):
        pre.append(tuple(w.shape))
        return w

    def wgrad_hook(name, grad):
        post.append(name)
        return grad

    opts = dist_moe.ExecutionOptions(weights_preprocess_fn=preprocess, experts_output_postprocess=lambda h3: h3 * 0.5,
                                     wgrad_postprocess_fn=wgrad_hook)
    got = h.run(ctx, *(leaf(w) for w in h.local_weights()), options=opts)
    ctx.close()
    assert_train_close(got, h.reference(postprocess=lambda h3: h3 * 0.5))
    assert post == ["w2", "w13"] and len(pre) == 4, (pre, post)  # forward, and again before backward


# ---- MXFP8 staged (upstream's MXFP8 two-rank rows; aggregate tolerances vs the BF16 reference) -----------------

MXFP8 = dist_moe.BlockScaledConfig(format=dist_moe.BlockScaledFormat.MXFP8_E4M3, pipeline="staged")


def prepared_leaves(h):
    """This rank's weights as leaves and their MXFP8 training preparations."""
    w13, w2 = (leaf(w) for w in h.local_weights())
    return w13, w2, dist_moe.prepare_block_scaled_weight(w13, MXFP8), dist_moe.prepare_block_scaled_weight(w2, MXFP8)


def case_mxfp8_e4m3_forward_and_backward_exercise_peer_paths(rank, world, dev, group):
    """Prepared weights (minimum slot: the backward recomputes), a repeated step bitwise identical,
    dynamic weights bitwise equal to prepared ones; all within the MXFP8 tolerances."""
    h = Harness(rank, world, dev)
    ctx = dist_moe.create_context(group=group, config=h.config(block_scaled=MXFP8, wgrad_dtype=torch.float32),
                                  device=dev)
    first = h.run(ctx, *prepared_leaves(h)[2:])
    second = h.run(ctx, *prepared_leaves(h)[2:])
    dynamic = h.run(ctx, *(leaf(w) for w in h.local_weights()))
    snapshot = ctx.planner_snapshot()
    ctx.close()
    assert_mxfp8_train_close(first, h.reference())
    for a, b, c in zip(first, second, dynamic):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        torch.testing.assert_close(a, c, rtol=0, atol=0)
    assert all(v == 0 for v in snapshot["layer_ids"])


def case_mxfp8_bounded_token_shape(rank, world, dev, group):
    h = Harness(rank, world, dev, T_max=2 * T)
    ctx = dist_moe.create_context(group=group, config=h.config(block_scaled=MXFP8), device=dev)
    got = h.run(ctx, *prepared_leaves(h)[2:])
    ctx.close()
    assert_mxfp8_train_close(got, h.reference())


def case_mxfp8_fully_padded_rank(rank, world, dev, group):
    pad = world - 1

    def ids_fn(r, gtok):
        ids = torch.cat([gtok % E, (gtok + 2) % E], dim=1)
        return torch.full_like(ids, -1) if r == pad else ids

    h = Harness(rank, world, dev, ids_fn=ids_fn)
    ctx = dist_moe.create_context(group=group, config=h.config(block_scaled=MXFP8), device=dev)
    got = h.run(ctx, *prepared_leaves(h)[2:])
    ctx.close()
    assert_mxfp8_train_close(got, h.reference())
    if rank == pad:
        assert got[0].abs().max() == 0 and got[1].abs().max() == 0 and got[2].abs().max() == 0


def _mxfp8_accumulate(rank, world, dev, group, grad_dtype):
    h = Harness(rank, world, dev)
    ctx = dist_moe.create_context(group=group, config=h.config(block_scaled=MXFP8), device=dev)
    w13, w2 = h.local_weights()
    p13, p2 = torch.nn.Parameter(w13.clone()), torch.nn.Parameter(w2.clone())
    if grad_dtype == torch.float32:
        p13.grad_dtype = p2.grad_dtype = torch.float32
    pw13, pw2 = (dist_moe.prepare_block_scaled_weight(p, MXFP8) for p in (p13, p2))
    opts = dist_moe.ExecutionOptions(inplace_wgrad_accum=True)
    first = h.run(ctx, pw13, pw2, options=opts)
    g13_first, g2_first = p13.grad.clone(), p2.grad.clone()
    ptrs = (p13.grad.data_ptr(), p2.grad.data_ptr())
    h.run(ctx, pw13, pw2, options=opts)
    ctx.close()
    assert_mxfp8_train_close((first[0], first[1], first[2], g13_first, g2_first), h.reference())
    assert p13.grad.dtype == grad_dtype and p2.grad.dtype == grad_dtype
    assert (p13.grad.data_ptr(), p2.grad.data_ptr()) == ptrs, "accumulation must keep the .grad storages"
    torch.testing.assert_close(p13.grad.float(), 2 * g13_first.float(), rtol=5e-2, atol=2e-2)
    torch.testing.assert_close(p2.grad.float(), 2 * g2_first.float(), rtol=5e-2, atol=2e-2)


def case_prepared_mxfp8_staged_accumulates_parameter_grad_bf16(rank, world, dev, group):
    _mxfp8_accumulate(rank, world, dev, group, torch.bfloat16)


def case_prepared_mxfp8_staged_accumulates_parameter_grad_fp32(rank, world, dev, group):
    if not hasattr(torch.Tensor, "grad_dtype"):
        return  # FP32 .grad of BF16 parameters needs Tensor.grad_dtype
    _mxfp8_accumulate(rank, world, dev, group, torch.float32)


def _mxfp8_rmsnorm(rank, world, dev, group, pipeline):
    h = Harness(rank, world, dev)
    bs = dist_moe.BlockScaledConfig(format=dist_moe.BlockScaledFormat.MXFP8_E4M3, pipeline=pipeline)
    ctx = dist_moe.create_context(group=group, config=h.config(block_scaled=bs), device=dev)
    got = h.run(ctx, *prepared_leaves(h)[2:],
                options=dist_moe.ExecutionOptions(experts_output_postprocess=rmsnorm_post()))
    ctx.close()
    assert_mxfp8_train_close(got, h.reference(rmsnorm_eps=1e-6))


def case_mxfp8_post_expert_rmsnorm(rank, world, dev, group):
    _mxfp8_rmsnorm(rank, world, dev, group, "staged")


def case_mxfp8_mega_post_expert_rmsnorm(rank, world, dev, group):
    """Upstream's MXFP8 Mega variant of the RMSNorm row: the one-launch forward, the staged backward."""
    _mxfp8_rmsnorm(rank, world, dev, group, "mega")


def case_mxfp8_clamped_swiglu(rank, world, dev, group):
    h = Harness(rank, world, dev)
    h.xs = [x * 4 for x in h.xs]
    cfg = h.config(block_scaled=MXFP8, activation="swiglu_clamped", swiglu_alpha=1.5, swiglu_limit=5.0)
    ctx = dist_moe.create_context(group=group, config=cfg, device=dev)
    got = h.run(ctx, *prepared_leaves(h)[2:])
    ctx.close()
    assert_mxfp8_train_close(got, h.reference(activation="swiglu_clamped", alpha=1.5, limit=5.0))


def case_mxfp8_inference(rank, world, dev, group):
    """Inference with prepared (training) and dynamic weights: the same bits, within tolerance."""
    h = Harness(rank, world, dev)
    ctx = dist_moe.create_context(group=group, config=h.config(block_scaled=MXFP8, inference=True), device=dev)
    w13, w2 = h.local_weights()
    p13, p2 = (dist_moe.prepare_block_scaled_weight(w, MXFP8) for w in (w13, w2))
    out = dist_moe.routed_experts(h.xs[rank], h.ids[rank], h.scores[rank], p13, p2, ctx)
    dynamic = dist_moe.routed_experts(h.xs[rank], h.ids[rank], h.scores[rank], w13, w2, ctx)
    ctx.close()
    torch.testing.assert_close(out, dynamic, rtol=0, atol=0)
    assert_aggregate_close(out, h.reference()[0], name="out", **MXFP8_FWD_TOL)


def case_mxfp8_min_slot_recompute_equals_full_save(rank, world, dev, group):
    case_min_slot_recompute_equals_full_save(rank, world, dev, group, block_scaled=MXFP8)


CASES = {name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}


# ---- emulated peers only (upstream's fake-process-group rows) ----------------------------------------------


def emulated_context_plan(rank, world, dev, group):
    """Upstream's test_multi_rank_fake_context_supports_bf16_and_mxfp8: T=128, D=F=128, K=2, E=4, two
    layers per slot, BF16 and MXFP8: the context's plan is plan_memory(config, R) and it is rank r of R;
    its windows have the R-rank sizes; a forward runs. Random routes: the scratch holds the topology
    maximum (an emulated rank receives R copies of its own local routes; T*K rows overflow about half
    the time, which the routing traps)."""
    g = torch.Generator(device="cpu").manual_seed(4242 + rank)
    for block_scaled in (None, MXFP8):
        cfg = dist_moe.Config(max_num_local_input_tokens=128, hidden_dim=128, intermediate_dim=128, top_k=2,
                              num_experts=4 * world, max_moe_layers_per_activation_slot=2,
                              device_scratch_capacity_factor=float(world), block_scaled=block_scaled)
        ctx = dist_moe.create_context(group=group, config=cfg, device=dev)
        plan = dist_moe.plan_memory(cfg, world)
        assert ctx.memory_plan == plan, (ctx.memory_plan, plan)
        assert (ctx.rank, ctx.ep_size) == (rank, world)
        assert ctx.dispatch_storage.numel() >= plan.dispatch_window_bytes
        assert ctx.combine_storage.numel() >= plan.combine_window_bytes
        x = torch.randn(128, 128, generator=g).to(dev, torch.bfloat16)
        ids = torch.randint(0, 4 * world, (128, 2), generator=g).to(dev, torch.int32)
        scores = torch.rand(128, 2, generator=g).to(dev)
        w13 = (torch.randn(4, 256, 128, generator=g) * 0.1).to(dev, torch.bfloat16)
        w2 = (torch.randn(4, 128, 128, generator=g) * 0.1).to(dev, torch.bfloat16)
        with torch.no_grad():
            out = dist_moe.routed_experts(x, ids, scores, w13, w2, ctx)
        local = ((ids // 4) == rank).any(dim=1)  # tokens with a route to this rank's experts
        assert out[local].abs().max() > 0
        assert not (~local).any() or out[~local].abs().max() == 0, "tokens routed only to absent ranks"
        ctx.close()


def emulated_explicit_flag_does_not_depend_on_backend_name(rank, world, dev, group):
    """Upstream's test_explicit_peer_emulation_does_not_depend_on_backend_name: the backend reported as
    "custom_fake" with emulate_peer_buffers=True gives the same emulated context."""
    real = dist.get_backend
    dist.get_backend = lambda group=None: "custom_fake"
    try:
        cfg = dist_moe.Config(max_num_local_input_tokens=16, hidden_dim=256, intermediate_dim=256, top_k=1,
                              num_experts=2 * world, max_moe_layers_per_activation_slot=1)
        ctx = dist_moe.create_context(group=group, config=cfg, device=dev, emulate_peer_buffers=True)
    finally:
        dist.get_backend = real
    assert (ctx.rank, ctx.ep_size) == (rank, world)
    ctx.close()


# Two-rank cases that do not apply to an emulated rank, and why (test_two_rank.py reports them skipped).
EMULATION_SKIPS = {
    "mxfp8_clamped_swiglu": "its bound against the BF16 reference (upstream's 0.075) holds on the two-rank data, where "
    "every token has both routes; an emulated rank keeps only the routes to its own experts, and on that data the "
    "MXFP8 recipe itself (the torch model of its quantization points) is 0.146 from BF16 in grad_x, as one real "
    "rank given the same routes is (s36 r3; the layer is 8.4e-3 from the model). test_emulated_peers.cu holds "
    "emulated MXFP8 clamped SwiGLU to the CPU oracle instead.",
}

EMULATED_CASES = {"emulated_context_plan": emulated_context_plan,
                  "emulated_explicit_flag_does_not_depend_on_backend_name":
                  emulated_explicit_flag_does_not_depend_on_backend_name}


# ---- traps (each in its own process group: a trap ends the CUDA context) ---------------------------------


def trap(rank, world, dev, group, scenario):
    cfg = dict(max_num_local_input_tokens=16, hidden_dim=256, intermediate_dim=256, top_k=1, num_experts=world * 2,
               max_moe_layers_per_activation_slot=1)
    if scenario == "overflow":
        cfg["device_scratch_capacity_factor"] = 0.5
    ctx = dist_moe.create_context(group=group, config=dist_moe.Config(**cfg), device=dev)
    t = 15 if (scenario == "unequal_t" and rank == world - 1) else 16
    x = torch.randn(t, 256, device=dev, dtype=torch.bfloat16)
    ids = torch.zeros(t, 1, dtype=torch.int32, device=dev)  # every token to expert 0
    if scenario == "bad_id":
        ids.fill_(-2)
    scores = torch.ones(t, 1, device=dev)
    w13 = torch.randn(2, 512, 256, device=dev, dtype=torch.bfloat16)
    w2 = torch.randn(2, 256, 256, device=dev, dtype=torch.bfloat16)
    opts = dist_moe.ExecutionOptions(validate_expert_ids=scenario == "bad_id")
    with torch.no_grad():
        out = dist_moe.routed_experts(x, ids, scores, w13, w2, ctx, options=opts)
    torch.cuda.synchronize()  # the trap surfaces here as a CUDA error
    print(f"[rank {rank}] no trap: {out.float().abs().sum().item()}", flush=True)


def worker(rank, world, store, out_dir, cases, trap_scenario):
    os.environ.setdefault("DMOE_COMM_TIMEOUT_MS", "30000")
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=world, device_id=dev)
    group = dist.group.WORLD
    if trap_scenario:
        trap(rank, world, dev, group, trap_scenario)
        return
    run_cases(rank, world, dev, group, out_dir, cases)


def emulate(rank, world, out_dir, cases):
    """Rank `rank` of `world` alone on GPU 0: a fake process group, so the contexts emulate their peers."""
    from torch.testing._internal.distributed.fake_pg import FakeStore  # registers the "fake" backend

    global EMULATED
    EMULATED = True
    torch.cuda.set_device(0)
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    run_cases(rank, world, torch.device("cuda", 0), dist.group.WORLD, out_dir, cases)


def run_cases(rank, world, dev, group, out_dir, cases):
    results = {}
    for name in cases:
        try:
            {**CASES, **EMULATED_CASES}[name](rank, world, dev, group)
            results[name] = "ok"
        except Exception as e:  # recorded per case; the suite goes on
            results[name] = f"FAIL: {type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"
        print(f"[rank {rank}] {name}: {results[name].splitlines()[0]}", flush=True)
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:  # after every case: a later
            json.dump(results, f, indent=1)  # crash of the CUDA context keeps what already ran
        dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--out", default=None)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--trap", default=None, choices=["unequal_t", "overflow", "bad_id"])
    p.add_argument("--emulate", type=int, default=None, metavar="RANK",
                   help="run only rank RANK of --ranks, on GPU 0, with emulated peers (adds the emulation cases)")
    a = p.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="dmoe_two_rank_")
    os.makedirs(out, exist_ok=True)
    if a.emulate is not None:
        os.environ.setdefault("DMOE_COMM_TIMEOUT_MS", "30000")
        cases = [c for c in a.cases.split(",") if c and c not in EMULATION_SKIPS] + list(EMULATED_CASES)
        emulate(a.emulate, a.ranks, out, cases)
        print(f"results in {out}")
        return
    store = tempfile.NamedTemporaryFile(prefix="dmoe_pg_", delete=False).name
    os.unlink(store)
    cases = [c for c in a.cases.split(",") if c]
    mp.spawn(worker, args=(a.ranks, store, out, cases, a.trap), nprocs=a.ranks, join=True)
    print(f"results in {out}")


if __name__ == "__main__":
    main()
