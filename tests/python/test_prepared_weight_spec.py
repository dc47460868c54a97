"""Prepared block-scaled weight layouts from the C++ core (dist_moe._native.prepared_weight_spec):
the shapes prepare_block_scaled_weight allocates and its fake implementation reports, without a GPU
or torch."""

import pytest

import dist_moe
from dist_moe._native_loader import native

FIELDS = ("fprop_data", "fprop_scale", "dgrad_data", "dgrad_scale", "global_scale", "global_scale_inv")


def spec(fmt, inference, G, N, K):
    return native().prepared_weight_spec(fmt, inference, G, N, K)


def fields(s):
    return {name: s[name] for name in FIELDS}


def test_mxfp8_training_carries_the_transposed_copy_dgrad_reads():
    """[2, 128, 256]: E4M3 fprop_data of the weight's shape, and its own dgrad_data [G, K, N] (the
    same codes transposed per expert: Hopper's E4M3 wgmma reads K-major operands only, where
    upstream's Blackwell kernels share one qdata); E8M0 scales [G*N, K/32] and [G*K, N/32]
    (upstream's fake-tracing shapes)."""
    s = spec("mxfp8_e4m3", False, 2, 128, 256)
    assert fields(s) == {
        "fprop_data": ("float8_e4m3fn", (2, 128, 256)),
        "fprop_scale": ("float8_e8m0fnu", (256, 8)),
        "dgrad_data": ("float8_e4m3fn", (2, 256, 128)),
        "dgrad_scale": ("float8_e8m0fnu", (512, 4)),
        "global_scale": None,
        "global_scale_inv": None,
    }
    assert "dgrad_data_is_fprop_data" not in s
    assert s["format"] == "mxfp8_e4m3" and s["inference"] is False
    assert (s["num_experts"], s["rows"], s["cols"]) == (2, 128, 256)


def test_mxfp8_inference_has_rows_only():
    """An MXFP8 inference preparation has FPROP data and 1x32 row scales only: no DGRAD or global-scale fields."""
    s = spec("mxfp8_e4m3", True, 2, 128, 256)
    assert fields(s) == {
        "fprop_data": ("float8_e4m3fn", (2, 128, 256)),
        "fprop_scale": ("float8_e8m0fnu", (256, 8)),
        "dgrad_data": None,
        "dgrad_scale": None,
        "global_scale": None,
        "global_scale_inv": None,
    }
    assert s["inference"] is True


@pytest.mark.parametrize("inference", [False, True])
def test_nvfp4_is_inference_whatever_the_flag(inference):
    """NVFP4: packed E2M1 [G, N, K/2], E4M3 scales [G, N, K/16], FP32 global scale and inverse [G]."""
    s = spec("nvfp4", inference, 2, 128, 256)
    assert fields(s) == {
        "fprop_data": ("float4_e2m1fn_x2", (2, 128, 128)),
        "fprop_scale": ("float8_e4m3fn", (2, 128, 16)),
        "dgrad_data": None,
        "dgrad_scale": None,
        "global_scale": ("float32", (2,)),
        "global_scale_inv": ("float32", (2,)),
    }
    assert s["inference"] is True and s["format"] == "nvfp4"


def test_fp8_blockwise_training_and_inference():
    """The private format: 128x128 FP32 scales and, for training, a transposed DGRAD copy."""
    s = spec("fp8_blockwise", False, 2, 256, 384)
    assert fields(s) == {
        "fprop_data": ("float8_e4m3fn", (2, 256, 384)),
        "fprop_scale": ("float32", (2, 2, 3)),
        "dgrad_data": ("float8_e4m3fn", (2, 384, 256)),
        "dgrad_scale": ("float32", (2, 3, 2)),
        "global_scale": None,
        "global_scale_inv": None,
    }
    s = spec("fp8_blockwise", True, 2, 256, 384)
    assert s["dgrad_data"] is None and s["dgrad_scale"] is None
    assert s["fprop_scale"] == ("float32", (2, 2, 3))


@pytest.mark.parametrize(
    "fmt,inference,dims,match",
    [
        ("mxfp8_e4m3", False, (2, 100, 256), "MXFP8 weight last two dims must be divisible by 32"),
        ("mxfp8_e4m3", False, (2, 128, 48), "MXFP8 weight last two dims must be divisible by 32"),
        ("mxfp8_e4m3", True, (2, 128, 40), "MXFP8 weight last two dims must be divisible by 32"),
        ("nvfp4", True, (2, 128, 40), "NVFP4 weight last dim must be divisible by 16"),
        ("fp8_blockwise", False, (2, 128, 192), "FP8 blockwise weight last two dims must be divisible by 128"),
        ("fp8_blockwise", True, (2, 96, 128), "FP8 blockwise weight last two dims must be divisible by 128"),
        ("mxfp8_e4m3", False, (0, 128, 128), "must have positive dims"),
        ("nvfp4", False, (2, -16, 128), "must have positive dims"),
    ],
)
def test_indivisible_dims_raise_value_error(fmt, inference, dims, match):
    """Dimensions the format's blocks do not divide raise ValueError with upstream's text."""
    with pytest.raises(ValueError, match=match):
        spec(fmt, inference, *dims)


def test_nvfp4_rows_need_no_divisibility():
    """NVFP4 blocks run along K only: N = 8 is fine."""
    assert spec("nvfp4", True, 1, 8, 32)["fprop_data"] == ("float4_e2m1fn_x2", (1, 8, 16))


def test_unknown_format_raises_value_error():
    """A format name outside the enum raises ValueError 'unsupported DistMoE block-scaled format'."""
    with pytest.raises(ValueError, match="unsupported DistMoE block-scaled format"):
        spec("int4", False, 1, 128, 128)


def test_public_format_enum_has_upstreams_members_and_fp8_blockwise():
    """Upstream's two members keep their names and values; FP8_BLOCKWISE (beyond upstream) is the
    third, and a BlockScaledConfig can name it."""
    assert {m.name: m.value for m in dist_moe.BlockScaledFormat} == {
        "MXFP8_E4M3": "mxfp8_e4m3", "NVFP4": "nvfp4", "FP8_BLOCKWISE": "fp8_blockwise"}
    assert dist_moe.BlockScaledConfig(format="fp8_blockwise").format is dist_moe.BlockScaledFormat.FP8_BLOCKWISE


def test_prepared_weight_is_factory_only_and_frozen():
    """PreparedWeight() raises TypeError "use prepare_block_scaled_weight()"; the factory's private
    constructor builds a frozen owner whose storage list skips absent fields."""
    import dataclasses

    with pytest.raises(TypeError, match=r"use prepare_block_scaled_weight\(\)"):
        dist_moe.PreparedWeight()
    names = [f.name for f in dataclasses.fields(dist_moe.PreparedWeight)]
    assert names == ["source", "format", "fprop_data", "fprop_scale", "dgrad_data", "dgrad_scale", "global_scale",
                     "global_scale_inv"]
    w = dist_moe.PreparedWeight._create(source="w", format=dist_moe.BlockScaledFormat.NVFP4, fprop_data=None,
                                        fprop_scale=None)
    assert w.dgrad_data is None and w.global_scale_inv is None and w.storage_tensors() == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.source = "v"
    assert w._with_source("v").source == "v" and w.source == "w"
