"""Per-call execution options, prepared weights and the public block-scaled format enum."""

from __future__ import annotations

import enum
import math
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable

from ._postprocess import RMSNormPostprocess


class BlockScaledFormat(enum.StrEnum):
    """The block-scaled formats: upstream's two, and FP8 blockwise (beyond upstream)."""

    MXFP8_E4M3 = "mxfp8_e4m3"  # E4M3 data, E8M0 scale per 32 values; training and inference
    NVFP4 = "nvfp4"  # packed E2M1, E4M3 scale per 16 values, FP32 per-expert scale; inference
    # Beyond upstream: DeepSeek-V3's recipe, Hopper's native FP8 one. E4M3 data, FP32 scale per
    # 1x128 activation block and per 128x128 weight block; training and inference.
    FP8_BLOCKWISE = "fp8_blockwise"


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


_OPERAND_FIELDS = ("fprop_data", "fprop_scale", "dgrad_data", "dgrad_scale", "global_scale", "global_scale_inv")


def _storage_key(t):
    """Identity of a tensor's untyped storage: the C++ StorageImpl address, which views share and
    which stays the same after the storage is resized (``resize_(0)``) or freed."""
    storage = t.untyped_storage()
    key = getattr(storage, "_cdata", None)
    return ("cdata", key) if key is not None else ("id", id(storage))


@dataclass(frozen=True, init=False, eq=False, repr=False)
class PreparedWeight:
    """Quantized expert weights made by ``prepare_block_scaled_weight`` (factory-only, frozen).

    ``source`` is the BF16 weight it was quantized from (WGRAD flows to it); ``format`` the
    ``BlockScaledFormat``. MXFP8 training: E4M3 ``fprop_data [G, N, K]`` and its own
    ``dgrad_data [G, K, N]`` (the codes transposed per expert -- at shared scales per 128x128 block
    when N and K are multiples of 128, for the FP8-blockwise DGRAD: docs/formats.md), E8M0 ``fprop_scale
    [G*N, K/32]`` and ``dgrad_scale [G*K, N/32]``. The transposed copy is a Hopper departure from
    upstream, whose Blackwell kernels share one qdata between FPROP and DGRAD: Hopper's E4M3 wgmma
    reads K-major operands only, so the DGRAD GEMM (reducing over N) reads ``dgrad_data``; it costs
    one more byte per weight element, for training preparations only. MXFP8 inference: ``fprop_*``
    only (1x32 rows). NVFP4: packed E2M1 ``fprop_data [G, N, K/2]`` (each 32-bit word in the
    Hopper GEMMs' bit order: docs/formats.md "NVFP4"; ``_prepare.nvfp4_weight_standard_packing``
    gives the plain packing), E4M3 ``fprop_scale [G, N, K/16]``, FP32 ``global_scale [G]`` and its
    exact reciprocal ``global_scale_inv [G]``.
    """

    source: Any
    format: Any
    fprop_data: Any
    fprop_scale: Any
    dgrad_data: Any = None
    dgrad_scale: Any = None
    global_scale: Any = None
    global_scale_inv: Any = None

    def __init__(self, *args, **kwargs):
        raise TypeError("use prepare_block_scaled_weight() to create a PreparedWeight")

    @classmethod
    def _create(cls, **values) -> "PreparedWeight":
        """The factory's constructor (``prepare_block_scaled_weight`` and the private helpers)."""
        self = object.__new__(cls)
        for f in fields(cls):
            if f.name in values:
                value = values.pop(f.name)
            elif f.default is not MISSING:
                value = f.default
            else:
                raise TypeError(f"PreparedWeight needs {f.name}")
            object.__setattr__(self, f.name, value)
        if values:
            raise TypeError(f"unknown PreparedWeight fields: {sorted(values)}")
        return self

    def _with_source(self, source) -> "PreparedWeight":
        """The same operand storages with a new ``source`` (the caller-owned refill's result)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["source"] = source
        return PreparedWeight._create(**values)

    def storage_tensors(self) -> tuple:
        """One tensor per unique untyped storage among the operands, in field order (the factory
        gives every present field its own storage; views sharing one would be listed once).
        Uniqueness is by storage identity, so the result is the same after a storage is released
        with ``resize_(0)``."""
        seen, out = set(), []
        for name in _OPERAND_FIELDS:
            t = getattr(self, name)
            if t is None:
                continue
            key = _storage_key(t)
            if key not in seen:
                seen.add(key)
                out.append(t)
        return tuple(out)

    def __repr__(self) -> str:
        parts = [f"format={self.format!s}"]
        for name in _OPERAND_FIELDS:
            t = getattr(self, name)
            if t is not None:
                parts.append(f"{name}={str(t.dtype).removeprefix('torch.')}{list(t.shape)}")
        return f"PreparedWeight({', '.join(parts)})"
