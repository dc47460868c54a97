"""One-GPU tests of host-backed overflow scratch (upstream's DistMoeVmmAllocationTest rows): contexts
whose ``VmmConfig`` maps part of the scratch in pinned host memory between the slots and the hot device
scratch (CUDA VMM: [device: slots][host][device: hot scratch]), running layers whose routing fills more
than the device section, so their kernels read and write scratch rows in host memory.

Every row checks the context's VMM sections against its plan, runs the layer with all routes on one
expert, asks ``check_overflow()`` for ``host_scratch_used > 0``, holds the numerics to the BF16
reference with the mode's upstream tolerances, and closes the context: a VMM buffer is one per device,
so a second live context is refused and a new one after ``close()`` works again.
"""

import pytest
import torch
from moe_reference import (
    MXFP8_FWD_TOL,
    assert_aggregate_close,
    assert_mxfp8_train_close,
    assert_planner_reset,
    assert_train_close,
    make_case,
    reference_moe,
    run_reference,
    run_train,
    single_rank_config,
)

import dist_moe

DEV = torch.device("cuda", 0)
MXFP8 = dist_moe.BlockScaledConfig(format=dist_moe.BlockScaledFormat.MXFP8_E4M3, pipeline="staged")
NVFP4 = dist_moe.BlockScaledConfig(format=dist_moe.BlockScaledFormat.NVFP4, pipeline="staged")
NVFP4_FWD_TOL = dict(rel_l2=0.29, cos=0.955)  # upstream's NVFP4 forward aggregate pair


def vmm_config(t, d, f, k, e, device_factor, prefetch=False, **kw):
    """A one-rank config whose total scratch is 1.0x the balanced need, `device_factor` of it on the
    device and the rest in host memory; with `prefetch` the context maps it on a background thread
    while it sets up its communication buffers, else synchronously."""
    return single_rank_config(t, d, f, k, e, device_scratch_capacity_factor=device_factor,
                              vmm=dist_moe.VmmConfig(total_scratch_capacity_factor=1.0, prefetch=prefetch), **kw)


def one_expert_case(t, d, f, k, seed):
    """A seeded case whose every route goes to expert 0 (of one), and an output gradient."""
    case = make_case(t, d, f, 1, k, seed=seed, device=DEV, ids=torch.zeros(t, k, dtype=torch.int64))
    g = torch.randn(t, d, generator=torch.Generator(device="cpu").manual_seed(seed + 2)).to(torch.bfloat16).to(DEV)
    return (*case, g)


def check_vmm_sections(world1, cfg):
    """A fresh context of `cfg`: its activation buffer is the plan's VMM range ([device prefix: the
    slots][host][device: hot scratch], each section the plan's bytes rounded up to the VMM
    granularity) and a second VMM context on the device is refused. Returns the context."""
    plan = dist_moe.plan_memory(cfg, 1)
    assert plan.uses_host_scratch and plan.host_scratch_bytes > 0, plan
    ctx = dist_moe.create_context(group=world1, config=cfg, device=DEV)
    try:
        resolved = ctx.memory_plan
        ab = ctx.activation_buffer
        sections = (resolved.vmm_device_prefix_bytes, resolved.vmm_host_section_bytes,
                    resolved.vmm_device_scratch_section_bytes)
        assert sections[0] >= plan.total_activation_bytes and sections[1] >= plan.host_scratch_bytes > 0
        assert sections[2] >= plan.device_scratch_bytes and sum(sections) == resolved.total_virtual_bytes, resolved
        assert resolved.vmm_padding_bytes == resolved.total_virtual_bytes - plan.total_virtual_bytes >= 0
        assert ab.buffer.numel() == resolved.total_virtual_bytes
        assert ab.host_scratch_size == plan.host_scratch_bytes and ab.device_scratch_size == plan.device_scratch_bytes
        assert ab.activation_slot_bytes == plan.activation_slot_bytes
        with pytest.raises(RuntimeError, match="already owns a live"):
            dist_moe.create_context(group=world1, config=cfg, device=DEV)
    except BaseException:
        ctx.close()  # the device's one VMM buffer goes back for the next test
        raise
    return ctx


def test_bf16_context_spills_into_host_scratch_and_releases_it(world1):
    """BF16 training, T=256, D=128, F=8192, K=1, E=1, device scratch 0.5 of the total (upstream's
    prefetched-context row): the step matches the reference with some of its scratch in host memory;
    closed and created again -- with the host section prefetched, then mapped synchronously, then
    prefetched -- every context runs the same step bitwise equal."""
    case = one_expert_case(256, 128, 8192, 1, seed=301)
    results = []
    for prefetch in (True, False, True):
        ctx = check_vmm_sections(world1, vmm_config(256, 128, 8192, 1, 1, 0.5, prefetch=prefetch))
        try:
            results.append(run_train(ctx, *case))
            info = ctx.activation_buffer.check_overflow()
            assert info.host_scratch_used > 0 and info.device_scratch_used == info.device_scratch_size, info
            assert_planner_reset(ctx)
        finally:
            ctx.close()
    assert_train_close(results[0], run_reference(*case))
    for i in (1, 2):
        for name, u, v in zip(("out", "grad_x", "grad_scores", "grad_w13", "grad_w2"), results[0], results[i]):
            torch.testing.assert_close(u, v, rtol=0, atol=0,
                                       msg=lambda m, n=name, j=i: f"{n}: context {j} vs the first: {m}")


def test_mxfp8_context_spills_into_host_scratch_and_releases_it(world1):
    """MXFP8 staged training (dynamic weights), T=256, D=F=128, K=1, E=1, device scratch 0.5, a 16 MiB
    activation slot: the step within upstream's MXFP8 tolerances with host scratch used, twice."""
    cfg = vmm_config(256, 128, 128, 1, 1, 0.5, block_scaled=MXFP8, activation_slot_bytes=16 << 20,
                     activation_slot_capacity_factor=None)
    case = one_expert_case(256, 128, 128, 1, seed=311)
    for _ in range(2):
        ctx = check_vmm_sections(world1, cfg)
        try:
            got = run_train(ctx, *case)
            assert ctx.activation_buffer.check_overflow().host_scratch_used > 0
            assert_planner_reset(ctx)
        finally:
            ctx.close()
        assert_mxfp8_train_close(got, run_reference(*case))


def test_mxfp8_execution_spills_into_host_scratch(world1):
    """MXFP8 staged, T=1024, D=128, F=8192, K=1, E=1, device scratch 0.125: a no-grad forward (scratch
    only: the slot state unchanged) and a training step both put scratch rows in host memory."""
    cfg = vmm_config(1024, 128, 8192, 1, 1, 0.125, block_scaled=MXFP8)
    x, ids, scores, w13, w2, g = one_expert_case(1024, 128, 8192, 1, seed=321)
    ctx = check_vmm_sections(world1, cfg)
    try:
        ab = ctx.activation_buffer
        with torch.no_grad():
            out = dist_moe.routed_experts(x, ids, scores, w13, w2, ctx)
        assert ab.check_overflow().host_scratch_used > 0
        assert_planner_reset(ctx)  # scratch only: nothing saved
        assert_aggregate_close(out, reference_moe(x, ids, scores, w13, w2), name="no-grad out", **MXFP8_FWD_TOL)
        assert_mxfp8_train_close(run_train(ctx, x, ids, scores, w13, w2, g), run_reference(x, ids, scores, w13, w2, g))
        assert ab.check_overflow().host_scratch_used > 0
        assert_planner_reset(ctx)
    finally:
        ctx.close()


def test_nvfp4_inference_spills_into_host_scratch(world1):
    """NVFP4 inference with prepared weights, T=256, D=256, F=8192, no slots, device scratch 0.5: the
    output within upstream's NVFP4 forward tolerance with host scratch used."""
    cfg = vmm_config(256, 256, 8192, 1, 1, 0.5, block_scaled=NVFP4, inference=True)
    x, ids, scores, w13, w2, _ = one_expert_case(256, 256, 8192, 1, seed=331)
    ctx = check_vmm_sections(world1, cfg)
    try:
        p13, p2 = (dist_moe.prepare_block_scaled_weight(w, NVFP4) for w in (w13, w2))
        out = dist_moe.routed_experts(x, ids, scores, p13, p2, ctx)
        assert ctx.activation_buffer.check_overflow().host_scratch_used > 0
        assert_aggregate_close(out, reference_moe(x, ids, scores, w13, w2), name="out", **NVFP4_FWD_TOL)
    finally:
        ctx.close()
