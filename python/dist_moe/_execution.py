"""Per-call execution options, prepared weights and the public block-scaled format enum."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from ._postprocess import RMSNormPostprocess


class BlockScaledFormat(enum.StrEnum):
    """The two public block-scaled formats."""

    MXFP8_E4M3 = "mxfp8_e4m3"  # E4M3 data, E8M0 scale per 32 values; training and inference
    NVFP4 = "nvfp4"  # packed E2M1, E4M3 scale per 16 values, FP32 per-expert scale; inference


def _is_tensor(x) -> bool:
    return all(hasattr(x, a) for a in ("dtype", "shape", "is_contiguous", "device"))


@dataclass(frozen=True)
class ExecutionOptions:
    """Per-call controls of ``routed_experts`` (upstream's ExecutionOptions)."""

    inplace_wgrad_accum: bool = False
    wgrad_parameter_owners: tuple | None = field(default=None, repr=False, compare=False)
    weights_preprocess_fn: Callable | None = None
    experts_output_postprocess: Any = None
    wgrad_postprocess_fn: Callable | None = None
    swiglu_clip_stats_out_3: Any = None
    swiglu_clip_limit: float = 7.0
    wgrad_destination_fn: Callable | None = None
    validate_expert_ids: bool = False
    zero_out_padded_callback_inputs: bool = False

    def __post_init__(self):
        stats = self.swiglu_clip_stats_out_3
        if stats is not None:
            if not _is_tensor(stats):
                raise TypeError("swiglu_clip_stats_out_3 must be a Tensor")
            if "float32" not in str(stats.dtype):
                raise TypeError("swiglu_clip_stats_out_3 must have dtype float32")
            if tuple(stats.shape) != (3,) or not stats.is_contiguous():
                raise ValueError("swiglu_clip_stats_out_3 must be contiguous with shape [3]")
            if not getattr(stats, "is_cuda", False):
                raise ValueError("swiglu_clip_stats_out_3 must be a CUDA tensor")
        limit = self.swiglu_clip_limit
        if isinstance(limit, bool) or not isinstance(limit, (int, float)):
            raise TypeError("swiglu_clip_limit must be a real number")
        if not math.isfinite(limit):
            raise ValueError(f"swiglu_clip_limit must be finite, got {limit}")
        if not isinstance(self.inplace_wgrad_accum, bool):
            raise TypeError("inplace_wgrad_accum must be a bool")
        if self.inplace_wgrad_accum and self.wgrad_postprocess_fn is not None:
            raise ValueError("inplace_wgrad_accum cannot be combined with wgrad_postprocess_fn")
        if self.wgrad_destination_fn is not None:
            if self.inplace_wgrad_accum or self.wgrad_postprocess_fn is not None:
                raise ValueError(
                    "wgrad_destination_fn cannot be combined with inplace_wgrad_accum or wgrad_postprocess_fn"
                )
            if not callable(self.wgrad_destination_fn):
                raise TypeError("wgrad_destination_fn must be callable")
        if self.wgrad_parameter_owners is not None:
            if not self.inplace_wgrad_accum:
                raise ValueError("wgrad_parameter_owners requires inplace_wgrad_accum=True")
            owners = self.wgrad_parameter_owners
            if not (isinstance(owners, tuple) and len(owners) == 2 and all(_is_tensor(o) for o in owners)):
                raise TypeError("wgrad_parameter_owners must be a (Tensor, Tensor) tuple")
        for name in ("validate_expert_ids", "zero_out_padded_callback_inputs"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool")

    @property
    def requires_eager(self) -> bool:
        """True when a Python callback forces eager execution (no tracing, no graphs)."""
        post = self.experts_output_postprocess
        if post is not None and not callable(post) and not isinstance(post, RMSNormPostprocess):
            raise ValueError("experts_output_postprocess must be callable, RMSNormPostprocess, or None")
        rmsnorm_observer = isinstance(post, RMSNormPostprocess) and (
            post.observe_expert_output_fn is not None or post.observe_expert_output_grad_fn is not None
        )
        return (
            self.weights_preprocess_fn is not None
            or (post is not None and not isinstance(post, RMSNormPostprocess))
            or rmsnorm_observer
            or self.wgrad_postprocess_fn is not None
            or self.wgrad_destination_fn is not None
        )


def resolve_options(options) -> ExecutionOptions:
    if options is None:
        return _DEFAULT_OPTIONS
    if not isinstance(options, ExecutionOptions):
        raise TypeError("options must be ExecutionOptions or None")
    return options


_DEFAULT_OPTIONS = ExecutionOptions()


class PreparedWeight:
    """Quantized expert weights made by ``prepare_block_scaled_weight`` (factory-only)."""

    def __init__(self, *args, **kwargs):
        raise TypeError("use prepare_block_scaled_weight() to create a PreparedWeight")
