"""Config, VmmConfig, BlockScaledConfig, ExecutionOptions and RMSNorm validation through Python.

Ports the CPU rows of upstream's DistMoeConfigTest that apply to this project (no torch needed).
"""

import math

import pytest

import dist_moe as dm


def base(**kw):
    args = dict(
        max_num_local_input_tokens=4,
        hidden_dim=128,
        intermediate_dim=128,
        top_k=2,
        num_experts=4,
        max_moe_layers_per_activation_slot=1,
    )
    args.update(kw)
    return dm.Config(**args)


def test_base_config_is_valid():
    """The small upstream config validates and keeps upstream's defaults."""
    c = base()
    assert c.device_scratch_capacity_factor == 1.0
    assert c.num_activation_slots == 1
    assert c.activation == "swiglu"
    assert c.swiglu_alpha == 1.702 and c.swiglu_limit == 7.0
    assert c.wgrad_dtype is None and c.inference is False


@pytest.mark.parametrize("field", ["max_num_local_input_tokens", "hidden_dim", "intermediate_dim", "top_k"])
def test_sizes_must_be_positive(field):
    """Each size field names itself when it is not positive."""
    with pytest.raises(ValueError, match=f"{field} must be positive, got 0"):
        base(**{field: 0})


def test_hidden_dim_multiple_of_64():
    """hidden_dim must be a multiple of 64 BF16 elements."""
    with pytest.raises(ValueError, match="hidden_dim must be a multiple of 64 BF16 elements, got 100"):
        base(hidden_dim=100)


def test_experts_and_top_k():
    """num_experts positive; top_k bounded by num_experts."""
    with pytest.raises(ValueError, match="num_experts must be positive"):
        base(num_experts=0, top_k=1)
    with pytest.raises(ValueError, match="top_k cannot exceed num_experts"):
        base(top_k=9, num_experts=8)


def test_layers_per_slot_positive():
    """max_moe_layers_per_activation_slot must be positive."""
    with pytest.raises(ValueError, match="max_moe_layers_per_activation_slot must be positive"):
        base(max_moe_layers_per_activation_slot=0)


def test_activation_slot_capacity_policy_is_unambiguous():
    """Slot bytes and slot factor are typed, bounded and mutually exclusive."""
    with pytest.raises(ValueError, match="mutually exclusive"):
        base(activation_slot_bytes=4096, activation_slot_capacity_factor=1.0)
    for bad in (-1, True, 1.5):
        with pytest.raises((TypeError, ValueError)):
            base(activation_slot_bytes=bad)
    for bad in (-1.0, math.nan, math.inf, True):
        with pytest.raises((TypeError, ValueError)):
            base(activation_slot_capacity_factor=bad)
    with pytest.raises(ValueError, match="does not retain saved activations"):
        base(inference=True, num_activation_slots=0, activation_slot_capacity_factor=1.0)


def test_slot_count_by_mode():
    """Training needs a slot; inference allows zero but not negative slots."""
    with pytest.raises(ValueError, match="training requires at least one activation slot"):
        base(num_activation_slots=0)
    assert base(inference=True, num_activation_slots=0).num_activation_slots == 0
    with pytest.raises(ValueError, match="num_activation_slots cannot be negative"):
        base(inference=True, num_activation_slots=-1)
    with pytest.raises(ValueError, match="does not retain saved activations"):
        base(inference=True, num_activation_slots=0, activation_slot_bytes=4096)


@pytest.mark.parametrize("bad", [math.nan, math.inf, 0.0])
def test_rejects_nonfinite_scratch_capacity_factors(bad):
    """Device and total scratch factors must be finite and positive."""
    with pytest.raises(ValueError, match="device_scratch_capacity_factor must be finite and positive"):
        base(device_scratch_capacity_factor=bad)
    with pytest.raises(ValueError, match="total_scratch_capacity_factor must be finite and positive"):
        dm.VmmConfig(total_scratch_capacity_factor=bad)


def test_vmm_prefetch_policy_requires_a_boolean():
    """VmmConfig.prefetch is a bool."""
    with pytest.raises(TypeError, match="prefetch must be a bool"):
        dm.VmmConfig(prefetch=1)


def test_num_sms_positive_when_specified():
    """num_sms, when set, must be positive."""
    with pytest.raises(ValueError, match="num_sms must be positive when specified"):
        base(num_sms=0)


def test_rejects_unknown_bf16_grouped_gemm_preset():
    """Only the listed Hopper presets are accepted."""
    with pytest.raises(ValueError, match="supported BF16 preset"):
        base(bf16_grouped_gemm_preset="unknown")
    assert base(bf16_grouped_gemm_preset="2wg_bm128_bn256").bf16_grouped_gemm_preset == "2wg_bm128_bn256"


def test_rejects_invalid_wgrad_dtype():
    """wgrad_dtype is None, bfloat16 or float32; others are a TypeError."""
    assert base().wgrad_dtype is None
    with pytest.raises(TypeError, match="wgrad_dtype"):
        base(wgrad_dtype="float16")
    assert base(wgrad_dtype="float32").wgrad_dtype == "float32"


def test_rejects_invalid_activation():
    """activation is one of the two SwiGLU literals."""
    with pytest.raises(ValueError, match="activation"):
        base(activation="gelu")


@pytest.mark.parametrize("bad", [0.0, math.nan, math.inf])
def test_rejects_invalid_clamped_swiglu_parameters(bad):
    """Clamped SwiGLU needs finite positive alpha and limit; plain SwiGLU ignores them."""
    with pytest.raises(ValueError, match="finite positive"):
        base(activation="swiglu_clamped", swiglu_alpha=bad)
    with pytest.raises(ValueError, match="finite positive"):
        base(activation="swiglu_clamped", swiglu_limit=bad)
    base(activation="swiglu", swiglu_alpha=bad)


def test_blockscaled_public_formats_are_explicit():
    """Upstream's two formats and FP8 blockwise (beyond upstream); MXFP8 is the default; NVFP4 has
    no fast_math."""
    assert {f.value for f in dm.BlockScaledFormat} == {"mxfp8_e4m3", "nvfp4", "fp8_blockwise"}
    assert dm.BlockScaledConfig(format="fp8_blockwise").format is dm.BlockScaledFormat.FP8_BLOCKWISE
    assert dm.BlockScaledConfig().format is dm.BlockScaledFormat.MXFP8_E4M3
    with pytest.raises(ValueError, match="fast_math"):
        dm.BlockScaledConfig(format=dm.BlockScaledFormat.NVFP4, fast_math=True)
    with pytest.raises(ValueError, match="unsupported DistMoE block-scaled format"):
        dm.BlockScaledConfig(format="mxfp4")
    with pytest.raises(ValueError, match="'staged' or 'mega'"):
        dm.BlockScaledConfig(pipeline="fused")


def test_blockscaled_kernel_config_rules():
    """Kernel-config dims are positive, num_ctas is 1 or 2, block_k is 128."""
    good = dict(num_ctas=1, block_m=128, block_n=128, block_k=128, num_smem_buffers=4, epilogue_subtile=64,
                kloop_unroll=1, swap_ab=False)
    dm.BlockScaledConfig(kernel_config=dm.BlockScaledKernelConfig(**good))
    with pytest.raises(ValueError, match="must be positive"):
        dm.BlockScaledConfig(kernel_config=dm.BlockScaledKernelConfig(**{**good, "block_m": 0}))
    with pytest.raises(ValueError, match="num_ctas"):
        dm.BlockScaledConfig(kernel_config=dm.BlockScaledKernelConfig(**{**good, "num_ctas": 3}))
    with pytest.raises(ValueError, match="requires block_k=128"):
        dm.BlockScaledConfig(kernel_config=dm.BlockScaledKernelConfig(**{**good, "block_k": 64}))


def test_nvfp4_requires_inference_and_aligned_dimensions():
    """NVFP4 is inference-only with dims multiples of 256."""
    nv = dm.BlockScaledConfig(format=dm.BlockScaledFormat.NVFP4)
    with pytest.raises(ValueError, match="inference-only"):
        base(hidden_dim=256, intermediate_dim=256, block_scaled=nv)
    with pytest.raises(ValueError, match="multiple of 256"):
        base(hidden_dim=128, intermediate_dim=256, block_scaled=nv, inference=True, num_activation_slots=0)
    base(hidden_dim=256, intermediate_dim=256, block_scaled=nv, inference=True, num_activation_slots=0)


def test_inference_allows_zero_activation_stacks():
    """Inference with zero slots is accepted."""
    assert base(inference=True, num_activation_slots=0).inference


class _FakeTensor:
    def __init__(self, dtype="torch.float32", shape=(3,), contiguous=True, is_cuda=True):
        self.dtype, self.shape, self._contiguous, self.is_cuda, self.device = dtype, shape, contiguous, is_cuda, "x"

    def is_contiguous(self):
        return self._contiguous


def test_execution_options_validate_clip_statistics():
    """Clip statistics: FP32 CUDA [3] tensor and a finite limit; bool flags are bools."""
    dm.ExecutionOptions(swiglu_clip_stats_out_3=_FakeTensor())
    with pytest.raises(ValueError, match="finite"):
        dm.ExecutionOptions(swiglu_clip_limit=math.inf)
    with pytest.raises(ValueError, match="CUDA"):
        dm.ExecutionOptions(swiglu_clip_stats_out_3=_FakeTensor(is_cuda=False))
    with pytest.raises(TypeError, match="float32"):
        dm.ExecutionOptions(swiglu_clip_stats_out_3=_FakeTensor(dtype="torch.float16"))
    with pytest.raises(ValueError, match=r"contiguous with shape \[3\]"):
        dm.ExecutionOptions(swiglu_clip_stats_out_3=_FakeTensor(shape=(4,)))
    with pytest.raises(TypeError, match="must be a Tensor"):
        dm.ExecutionOptions(swiglu_clip_stats_out_3=[0.0, 0.0, 0.0])
    for name in ("validate_expert_ids", "zero_out_padded_callback_inputs"):
        with pytest.raises(TypeError, match="bool"):
            dm.ExecutionOptions(**{name: 1})


def test_wgrad_option_exclusivity():
    """Inplace accumulation, postprocess hooks and destination callbacks exclude each other."""
    with pytest.raises(ValueError, match="wgrad_postprocess_fn"):
        dm.ExecutionOptions(inplace_wgrad_accum=True, wgrad_postprocess_fn=lambda n, g: g)
    with pytest.raises(ValueError, match="cannot be combined"):
        dm.ExecutionOptions(inplace_wgrad_accum=True, wgrad_destination_fn=lambda *a: None)
    with pytest.raises(ValueError, match="inplace_wgrad_accum"):
        dm.ExecutionOptions(wgrad_parameter_owners=(_FakeTensor(), _FakeTensor()))


def test_callback_options_require_eager_execution():
    """requires_eager is True exactly for Python callbacks."""
    rms = dm.RMSNormPostprocess(eps=1e-6, norm_output_dtype="float32", output_dtype="bfloat16")
    assert not dm.ExecutionOptions().requires_eager
    assert not dm.ExecutionOptions(experts_output_postprocess=rms).requires_eager
    assert not dm.ExecutionOptions(inplace_wgrad_accum=True).requires_eager
    assert dm.ExecutionOptions(experts_output_postprocess=lambda h: h).requires_eager
    observed = dm.RMSNormPostprocess(eps=1e-6, norm_output_dtype="float32", output_dtype="bfloat16",
                                     observe_expert_output_fn=print)
    assert dm.ExecutionOptions(experts_output_postprocess=observed).requires_eager
    assert dm.ExecutionOptions(weights_preprocess_fn=lambda w: w).requires_eager
    assert dm.ExecutionOptions(wgrad_postprocess_fn=lambda n, g: g).requires_eager
    with pytest.raises(ValueError, match="must be callable, RMSNormPostprocess, or None"):
        _ = dm.ExecutionOptions(experts_output_postprocess=3).requires_eager


def test_supports_fused_post_expert_rmsnorm():
    """The support predicate applies the base contract."""
    ok = dict(input_dtype="bfloat16", score_dtype="float32", norm_output_dtype="float32",
              output_dtype="bfloat16", topk=8, dim=7168)
    assert dm.supports_fused_post_expert_rmsnorm(**ok)
    assert not dm.supports_fused_post_expert_rmsnorm(**{**ok, "output_dtype": "float32"})
    assert not dm.supports_fused_post_expert_rmsnorm(**{**ok, "topk": 6})
    assert not dm.supports_fused_post_expert_rmsnorm(**{**ok, "dim": 128})


def test_resource_owner_types_are_factory_only():
    """Context and PreparedWeight cannot be constructed directly."""
    with pytest.raises(TypeError, match="use"):
        dm.Context()
    with pytest.raises(TypeError, match="use"):
        dm.PreparedWeight()
