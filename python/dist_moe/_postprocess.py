"""Post-expert RMSNorm fused into the top-k reduction (upstream's ``_postprocess``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ._dtypes import dtype_name
from ._native_loader import native


@dataclass(frozen=True)
class RMSNormPostprocess:
    """Normalize each route row in FP32, weight it by its score, then sum the K routes.

    The constructor validates nothing; ``routed_experts`` validates against the call's dtypes.
    """

    eps: float
    norm_output_dtype: Any
    output_dtype: Any
    require_bitwise: bool = True
    weight: Any = None
    gain_center: float = 0.0
    use_kahan: bool = False
    observe_expert_output_fn: Callable | None = None
    observe_expert_output_grad_fn: Callable | None = None
    recompute_rstd: bool = False


def supports_fused_post_expert_rmsnorm(
    *, input_dtype, score_dtype, norm_output_dtype, output_dtype, topk: int, dim: int
) -> bool:
    """True when the fused RMSNorm kernel covers these dtypes, top-k and hidden size."""
    names = [dtype_name(d) for d in (input_dtype, score_dtype, norm_output_dtype, output_dtype)]
    if any(n is None for n in names):
        return False
    if names[3] != names[0]:
        return False
    return bool(native().supports_fused_post_expert_rmsnorm(*names, int(topk), int(dim)))


def validate_rmsnorm_postprocess(
    post: RMSNormPostprocess, *, input_dtype, score_dtype, topk: int, dim: int, training: bool
) -> None:
    """Upstream's ``_validate_rmsnorm_postprocess`` (ValueError on every violation)."""
    names = {
        "norm_output_dtype": dtype_name(post.norm_output_dtype),
        "output_dtype": dtype_name(post.output_dtype),
        "input": dtype_name(input_dtype),
        "score": dtype_name(score_dtype),
    }
    for field, name in names.items():
        if name is None:
            raise ValueError(f"RMSNormPostprocess {field} must be a dtype")
    weight_dtype = names["input"]
    if post.weight is not None:
        weight_dtype = dtype_name(getattr(post.weight, "dtype", None)) or "unknown"
        shape = tuple(getattr(post.weight, "shape", ()))
        if shape != (dim,) or not getattr(post.weight, "is_cuda", False):
            raise ValueError(f"RMSNormPostprocess weight must be a contiguous CUDA tensor of shape [{dim}]")
        if weight_dtype == "unknown":
            raise ValueError("RMSNormPostprocess weight must have the input dtype")
    native().validate_rmsnorm(
        float(post.eps),
        names["norm_output_dtype"],
        names["output_dtype"],
        bool(post.require_bitwise),
        post.weight is not None,
        weight_dtype,
        float(post.gain_center),
        bool(post.use_kahan),
        bool(post.recompute_rstd),
        names["input"],
        names["score"],
        int(topk),
        int(dim),
        bool(training),
    )
