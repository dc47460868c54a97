"""plan_memory through Python: upstream's DistMoeMemoryPlanTest rows that need no device."""

import math

import pytest

import dist_moe as dm


def config(**kw):
    args = dict(
        max_num_local_input_tokens=4,
        hidden_dim=128,
        intermediate_dim=128,
        top_k=2,
        num_experts=4,
        max_moe_layers_per_activation_slot=2,
        device_scratch_capacity_factor=1.0,
        vmm=dm.VmmConfig(total_scratch_capacity_factor=2.0),
    )
    args.update(kw)
    return dm.Config(**args)


def test_derives_original_planner_sizes():
    """The small example's rows and bytes (ep 2)."""
    p = dm.plan_memory(config(), 2)
    assert (p.balanced_recv_rows, p.device_scratch_capacity_rows, p.total_scratch_capacity_rows) == (8, 8, 16)
    assert p.saved_input_bytes_per_layer == 1024
    assert p.device_scratch_bytes == 12288 and p.host_scratch_bytes == 12288
    assert p.minimum_activation_slot_bytes == 2048
    assert p.balanced_full_save_activation_slot_bytes == 16384
    assert p.maximum_useful_activation_slot_bytes == 28672
    assert p.activation_slot_capacity_factor is None
    assert p.total_activation_bytes == 2048 and p.activation_slot_bytes == 2048
    assert p.total_device_buffer_bytes == 14336 and p.total_virtual_bytes == 26624
    assert p.uses_host_scratch


def test_memory_planning_example_text():
    """The README example's explain() lines (slot factor 1.0)."""
    text = dm.plan_memory(config(activation_slot_capacity_factor=1.0), 2).explain()
    assert "  balanced/device/total rows: 8/8/16\n" in text
    assert "(balanced capacity factor 1)" in text
    assert "virtual address range: 0.000 GiB (40,960 bytes); balanced routing fits without recompute" in text


def test_prefetch_policy_does_not_change_the_memory_plan():
    """VMM prefetch is an execution detail."""
    a = dm.plan_memory(config(vmm=dm.VmmConfig(2.0, prefetch=True)), 2)
    b = dm.plan_memory(config(vmm=dm.VmmConfig(2.0, prefetch=False)), 2)
    assert a == b


def test_activation_slot_capacity_modes_are_independent_of_scratch():
    """Exact bytes align up; factors interpolate between minimum and balanced full-save."""
    assert dm.plan_memory(config(activation_slot_bytes=2049), 2).activation_slot_bytes == 2176
    assert dm.plan_memory(config(activation_slot_bytes=2049, num_activation_slots=3), 2).total_activation_bytes == 6528
    assert dm.plan_memory(config(activation_slot_capacity_factor=0.0), 2).activation_slot_bytes == 2048
    assert dm.plan_memory(config(activation_slot_capacity_factor=1.0), 2).activation_slot_bytes == 16384
    assert dm.plan_memory(config(activation_slot_capacity_factor=1.5), 2).activation_slot_bytes == 2048 + 21504
    a = dm.plan_memory(config(activation_slot_capacity_factor=1.0), 2)
    b = dm.plan_memory(config(activation_slot_capacity_factor=1.0, device_scratch_capacity_factor=2.0), 2)
    assert a.activation_slot_bytes == b.activation_slot_bytes
    assert a.device_scratch_bytes != b.device_scratch_bytes


def test_mxfp8_activation_slot_capacity_factors_follow_the_same_formula():
    """Upstream's MXFP8 rows of the capacity-modes test (T = 256): factor 1.0 is the balanced full
    save, 1.5 the minimum plus 1.5x the span to it (rounded up to the 128-byte alignment), 0.0 the
    minimum; the balanced full save is the MXFP8 accounting's, not BF16's."""
    mxfp8 = dm.BlockScaledConfig(format=dm.BlockScaledFormat.MXFP8_E4M3)

    def slot(factor, **kw):
        return dm.plan_memory(config(max_num_local_input_tokens=256, activation_slot_capacity_factor=factor, **kw), 2)

    p0, p1, p15 = (slot(f, block_scaled=mxfp8) for f in (0.0, 1.0, 1.5))
    lo, hi = p1.minimum_activation_slot_bytes, p1.balanced_full_save_activation_slot_bytes
    assert 0 < lo < hi
    assert p0.activation_slot_bytes == lo and p1.activation_slot_bytes == hi
    want = lo + math.ceil(1.5 * (hi - lo))
    assert p15.activation_slot_bytes == (want + 127) // 128 * 128
    assert hi != slot(1.0).balanced_full_save_activation_slot_bytes  # the MXFP8 accounting, not BF16's


def test_rejects_budget_below_all_recompute_minimum():
    """Exact bytes below the minimum are rejected with both numbers."""
    with pytest.raises(ValueError, match="minimum required 2048"):
        dm.plan_memory(config(activation_slot_bytes=1024), 2)


def test_host_overflow_must_extend_device_capacity():
    """The VMM total factor must cover the device factor after clamping."""
    with pytest.raises(ValueError, match="must cover at least"):
        dm.plan_memory(config(device_scratch_capacity_factor=2.0, vmm=dm.VmmConfig(1.0)), 2)


def test_ep_size_and_device_checks():
    """ep_size must be positive; a device must be CUDA."""
    with pytest.raises(ValueError, match="ep_size must be positive"):
        dm.plan_memory(config(), 0)
    with pytest.raises(ValueError, match="device must be CUDA"):
        dm.plan_memory(config(), 2, device="cpu")


def test_explain_reports_physical_sections_and_budget_bounds():
    """explain() names every section and the budget bounds."""
    text = dm.plan_memory(config(), 2).explain()
    for needle in ("activation slots", "device scratch", "host overflow scratch", "minimum", "maximum useful"):
        assert needle in text


def test_explain_identifies_scratch_only_inference():
    """Inference: zero slot sizes, device buffer == device scratch, scratch-only text."""
    p = dm.plan_memory(config(inference=True, num_activation_slots=0), 2)
    assert p.minimum_activation_slot_bytes == p.balanced_full_save_activation_slot_bytes == 0
    assert p.maximum_useful_activation_slot_bytes == p.total_activation_bytes == 0
    assert p.total_device_buffer_bytes == p.device_scratch_bytes
    text = p.explain()
    assert "activation slots: 0 slot(s)" in text
    assert "scratch-only inference; no saved activations" in text
    assert "across" not in text


def test_plans_blockscaled_activation_and_host_scratch():
    """MXFP8 T=256: padded rows 640/1152, activation and host scratch present."""
    p = dm.plan_memory(config(max_num_local_input_tokens=256, block_scaled=dm.BlockScaledConfig()), 2)
    assert (p.device_scratch_capacity_rows, p.total_scratch_capacity_rows) == (640, 1152)
    assert p.total_activation_bytes > 0 and p.host_scratch_bytes > 0


def test_blockscaled_memory_plan_reports_padded_receive_capacity():
    """MXFP8 T=100, E=8, f=1.5: balanced 200 rows, device capacity 768 rows."""
    p = dm.plan_memory(
        config(max_num_local_input_tokens=100, num_experts=8, device_scratch_capacity_factor=1.5, vmm=None,
               block_scaled=dm.BlockScaledConfig()),
        2,
    )
    assert p.balanced_recv_rows == 200 and p.device_scratch_capacity_rows == 768


def test_documented_large_model_bf16_plans():
    """The large-model BF16 table at EP16 (minimum, exact 16 GiB, factor 1.0)."""
    big = dict(max_num_local_input_tokens=4096, hidden_dim=4096, intermediate_dim=14336, top_k=8, num_experts=128,
               max_moe_layers_per_activation_slot=32, device_scratch_capacity_factor=1.5,
               vmm=dm.VmmConfig(16.0))
    p = dm.plan_memory(dm.Config(**big), 16)
    assert (p.total_activation_bytes, p.device_scratch_bytes, p.host_scratch_bytes, p.total_device_buffer_bytes) == (
        1073741824, 7449083904, 72007811072, 8522825728)
    assert dm.plan_memory(dm.Config(**big, activation_slot_bytes=16 << 30), 16).total_device_buffer_bytes == 24628953088
    assert dm.plan_memory(dm.Config(**big, activation_slot_capacity_factor=1.0), 16).total_activation_bytes == 77309411328


def test_documented_large_model_mxfp8_plans():
    """The large-model MXFP8 table at EP16 (upstream's numbers), for both pipelines."""
    big = dict(max_num_local_input_tokens=4096, hidden_dim=4096, intermediate_dim=14336, top_k=8, num_experts=128,
               max_moe_layers_per_activation_slot=32, device_scratch_capacity_factor=1.5,
               vmm=dm.VmmConfig(16.0))
    for pipeline in ("staged", "mega"):
        mx = dict(big, block_scaled=dm.BlockScaledConfig(pipeline=pipeline))
        plans = [dm.plan_memory(dm.Config(**mx), 16),
                 dm.plan_memory(dm.Config(**mx, activation_slot_bytes=16 << 30), 16),
                 dm.plan_memory(dm.Config(**mx, activation_slot_capacity_factor=1.0), 16)]
        actual = [(p.total_activation_bytes, p.device_scratch_bytes, p.host_scratch_bytes, p.total_device_buffer_bytes)
                  for p in plans]
        assert actual == [
            (1073741824, 8561811456, 81282465792, 9635553280),
            (17179869184, 8561811456, 81282465792, 25741680640),
            (90839973888, 8561811456, 81282465792, 99401785344),
        ], pipeline
        assert (plans[0].device_scratch_capacity_rows, plans[0].total_scratch_capacity_rows) == (50048, 525184)
