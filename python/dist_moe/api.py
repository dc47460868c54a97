"""Dist-MoE public Python API (mirrors upstream's ``dist_moe.api``; newest revision).

Config types validate through the C++ core (``dist_moe._native``): the same rules and messages as
the C++ API. Importing this module initializes neither CUDA nor a process group, and does not
import torch.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from ._dtypes import dtype_name
from ._context import Context
from ._execution import BlockScaledFormat, ExecutionOptions, PreparedWeight, resolve_options
from ._native_loader import native
from ._postprocess import RMSNormPostprocess, supports_fused_post_expert_rmsnorm

__all__ = [
    "Bf16GroupedGemmPreset",
    "BlockScaledConfig",
    "BlockScaledFormat",
    "BlockScaledKernelConfig",
    "Config",
    "Context",
    "ExecutionOptions",
    "MemoryPlan",
    "PreparedWeight",
    "RMSNormPostprocess",
    "VmmConfig",
    "create_context",
    "plan_memory",
    "prepare_block_scaled_weight",
    "routed_experts",
    "supports_fused_post_expert_rmsnorm",
]

_log = logging.getLogger("dist_moe")

SWIGLU_CLAMP_ALPHA_DEFAULT = 1.702
SWIGLU_CLAMP_LIMIT_DEFAULT = 7.0

# Hopper wgmma presets: <consumer warpgroups>wg_bm<BLOCK_M>_bn<BLOCK_N>[_c2 = 2-CTA cluster].
Bf16GroupedGemmPreset = Literal[
    "1wg_bm64_bn128", "1wg_bm64_bn256", "2wg_bm128_bn128", "2wg_bm128_bn256", "2wg_bm128_bn256_c2"
]


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_real(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


@dataclass(frozen=True)
class VmmConfig:
    """Host-backed overflow scratch through CUDA VMM. With ``prefetch`` the context maps the sections
    (pinning the host pages) on a background thread while it sets up its communication buffers;
    without it, when it creates the activation buffer. The plan is the same either way."""

    total_scratch_capacity_factor: float = 16.0
    prefetch: bool = True

    def __post_init__(self):
        if not isinstance(self.prefetch, bool):
            raise TypeError("prefetch must be a bool")
        if not _is_real(self.total_scratch_capacity_factor):
            raise TypeError("total_scratch_capacity_factor must be a real number")
        native().validate_vmm(float(self.total_scratch_capacity_factor), self.prefetch)


@dataclass(frozen=True)
class BlockScaledKernelConfig:
    """Expert-only override of the Hopper block-scaled GEMM configuration."""

    num_ctas: int
    block_m: int
    block_n: int
    block_k: int
    num_smem_buffers: int
    epilogue_subtile: int
    kloop_unroll: int
    swap_ab: bool
    num_warps: int = 12
    static_scheduler: bool = False


@dataclass(frozen=True)
class BlockScaledConfig:
    """Selects a block-scaled format (None in Config means BF16)."""

    format: BlockScaledFormat = BlockScaledFormat.MXFP8_E4M3
    fast_math: bool = False
    pipeline: Literal["staged", "mega"] = "staged"
    kernel_config: BlockScaledKernelConfig | None = None

    def __post_init__(self):
        try:
            fmt = BlockScaledFormat(self.format)
        except ValueError:
            raise ValueError(f"unsupported DistMoE block-scaled format: {self.format!r}") from None
        object.__setattr__(self, "format", fmt)
        if self.kernel_config is not None and not isinstance(self.kernel_config, BlockScaledKernelConfig):
            raise TypeError("kernel_config must be BlockScaledKernelConfig or None")
        native().validate_block_scaled(self._as_dict())

    def _as_dict(self) -> dict:
        return {
            "format": str(self.format),
            "fast_math": bool(self.fast_math),
            "pipeline": str(self.pipeline),
            "kernel_config": None if self.kernel_config is None else asdict(self.kernel_config),
        }


@dataclass(frozen=True)
class Config:
    """Static shape and memory policy of one Dist-MoE context (upstream's Config)."""

    max_num_local_input_tokens: int
    hidden_dim: int
    intermediate_dim: int
    top_k: int
    num_experts: int
    max_moe_layers_per_activation_slot: int
    device_scratch_capacity_factor: float = 1.0
    activation_slot_bytes: int | None = None
    activation_slot_capacity_factor: float | None = None
    num_activation_slots: int = 1
    vmm: VmmConfig | None = None
    num_sms: int | None = None
    bf16_grouped_gemm_preset: Bf16GroupedGemmPreset | None = None
    block_scaled: BlockScaledConfig | None = None
    activation: Literal["swiglu", "swiglu_clamped"] = "swiglu"
    swiglu_alpha: float = SWIGLU_CLAMP_ALPHA_DEFAULT
    swiglu_limit: float = SWIGLU_CLAMP_LIMIT_DEFAULT
    wgrad_dtype: Any = None
    inference: bool = False

    def __post_init__(self):
        for name in (
            "max_num_local_input_tokens",
            "hidden_dim",
            "intermediate_dim",
            "top_k",
            "num_experts",
            "max_moe_layers_per_activation_slot",
            "num_activation_slots",
        ):
            if not _is_int(getattr(self, name)):
                raise TypeError(f"{name} must be an integer, got {getattr(self, name)!r}")
        if self.activation_slot_bytes is not None and not _is_int(self.activation_slot_bytes):
            raise TypeError("activation_slot_bytes must be an integer")
        if self.activation_slot_capacity_factor is not None and not _is_real(self.activation_slot_capacity_factor):
            raise TypeError("activation_slot_capacity_factor must be a real number")
        if not _is_real(self.device_scratch_capacity_factor):
            raise TypeError("device_scratch_capacity_factor must be a real number")
        if self.num_sms is not None and not _is_int(self.num_sms):
            raise TypeError("num_sms must be an integer")
        if self.vmm is not None and not isinstance(self.vmm, VmmConfig):
            raise TypeError("vmm must be VmmConfig or None")
        if self.block_scaled is not None and not isinstance(self.block_scaled, BlockScaledConfig):
            raise TypeError("block_scaled must be BlockScaledConfig or None")
        if self.activation not in ("swiglu", "swiglu_clamped"):
            raise ValueError(f"activation must be 'swiglu' or 'swiglu_clamped', got {self.activation!r}")
        if self.wgrad_dtype is not None and dtype_name(self.wgrad_dtype) not in ("bfloat16", "float32"):
            raise TypeError(f"wgrad_dtype must be None, torch.bfloat16, or torch.float32, got {self.wgrad_dtype}")
        if not isinstance(self.inference, bool):
            raise TypeError("inference must be a bool")
        native().validate_config(self._as_dict())

    def _as_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["vmm"] = None if self.vmm is None else asdict(self.vmm)
        d["block_scaled"] = None if self.block_scaled is None else self.block_scaled._as_dict()
        d["wgrad_dtype"] = None if self.wgrad_dtype is None else dtype_name(self.wgrad_dtype)
        for name in ("device_scratch_capacity_factor", "swiglu_alpha", "swiglu_limit"):
            d[name] = float(d[name])
        if d["activation_slot_capacity_factor"] is not None:
            d["activation_slot_capacity_factor"] = float(d["activation_slot_capacity_factor"])
        return d


@dataclass(frozen=True)
class MemoryPlan:
    """Every byte one rank's context owns (upstream's 23 fields, then this project's windows)."""

    balanced_recv_rows: int
    device_scratch_capacity_rows: int
    total_scratch_capacity_rows: int
    device_scratch_capacity_factor: float
    total_scratch_capacity_factor: float
    saved_input_bytes_per_layer: int
    device_scratch_bytes: int
    host_scratch_bytes: int
    minimum_activation_slot_bytes: int
    balanced_full_save_activation_slot_bytes: int
    maximum_useful_activation_slot_bytes: int
    activation_slot_bytes: int
    activation_slot_capacity_factor: float | None
    total_activation_bytes: int
    total_device_buffer_bytes: int
    total_virtual_bytes: int
    num_activation_slots: int
    inference: bool
    vmm_granularity_bytes: int | None = None
    vmm_device_prefix_bytes: int = 0
    vmm_host_section_bytes: int = 0
    vmm_device_scratch_section_bytes: int = 0
    vmm_padding_bytes: int = 0
    routing_window_bytes: int = 0
    dispatch_window_bytes: int = 0
    combine_window_bytes: int = 0
    _explain: str = ""

    @property
    def uses_host_scratch(self) -> bool:
        return self.host_scratch_bytes > 0

    def explain(self) -> str:
        """The plan in upstream's categories, then this project's symmetric windows."""
        return self._explain


def plan_memory(config: Config, ep_size: int, *, device=None) -> MemoryPlan:
    """Plans every buffer of a context for ``ep_size`` ranks. Pure: allocates nothing.

    ``device`` is only checked here (it must be CUDA); the VMM sections are resolved against the
    device's allocation granularity when the context is created (``Context.memory_plan`` holds the
    resolved plan: the VMM section sizes and padding of the buffer it mapped).
    """
    if not isinstance(config, Config):
        raise TypeError("config must be a dist_moe.Config")
    if not _is_int(ep_size):
        raise TypeError("ep_size must be an integer")
    if ep_size <= 0:
        raise ValueError(f"ep_size must be positive, got {ep_size}")
    if device is not None and not str(getattr(device, "type", device)).startswith("cuda"):
        raise ValueError(f"device must be CUDA, got {device}")
    raw = native().plan_memory(config._as_dict(), ep_size)
    for warning in raw["warnings"]:
        _log.warning("%s", warning)
    return _memory_plan_from_dict(raw)


def _memory_plan_from_dict(raw: dict) -> MemoryPlan:
    """A MemoryPlan from the C++ core's plan dict (plan_memory's, or a live context's resolved one)."""
    fields = {k: v for k, v in raw.items() if k not in ("warnings", "explain")}
    return MemoryPlan(**fields, _explain=raw["explain"])


def create_context(*, group, config: Config, device=None, emulate_peer_buffers=None) -> Context:
    """Collectively creates a context over the torch process group ``group`` (every rank, same
    order, same config): an NCCL communicator bootstrapped over ``group`` (unique id broadcast),
    symmetric windows, the activation buffer and the planner state. Create contexts before tracing
    or graph capture; ``context.close()`` releases them.

    ``emulate_peer_buffers`` (None: True exactly when ``dist.get_backend(group) == "fake"``): this
    process alone is rank r of the group's size, on a one-rank communicator, with every peer's
    window aliasing its own (not collective). Each virtual peer then holds this rank's tokens, the
    EP barriers wait for this rank alone, and routes to other ranks' experts come back as exact
    zeros: it validates shapes, memory and an EP size's kernels on one GPU, not other ranks'
    numerics. A fake process group of size 1 is a real single-rank context.

    Block-scaled contexts: ``BlockScaledConfig(format=MXFP8_E4M3 or FP8_BLOCKWISE,
    pipeline="staged")`` (training and inference; hidden_dim and intermediate_dim multiples of 128,
    num_experts >= world size; FP8_BLOCKWISE is beyond upstream: DeepSeek-V3's recipe), and
    ``BlockScaledConfig(format=NVFP4, pipeline="staged")``: inference contexts only (``Config``
    raises "NVFP4 DistMoE is inference-only" otherwise), with prepared weights only (NVFP4
    ``prepare_block_scaled_weight`` results), hidden_dim and intermediate_dim multiples of 256,
    hidden_dim <= 16384 and intermediate_dim <= 8192. ``fast_math`` and ``kernel_config`` have no
    Hopper execution yet, nor has ``pipeline="mega"`` except for decode-sized NVFP4 inference
    contexts and MXFP8 contexts (inference of any size; training, whose forward runs in one launch):
    the C++ context raises ValueError saying so.
    """
    if not isinstance(config, Config):
        raise TypeError("config must be a dist_moe.Config")
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise ImportError("create_context needs PyTorch: the Dist-MoE torch front end runs on torch tensors") from e
    from ._context import create_context as _create

    return _create(group=group, config=config, plan_memory=plan_memory, resolved_plan=_memory_plan_from_dict,
                   device=device, emulate_peer_buffers=emulate_peer_buffers)


def prepare_block_scaled_weight(weight, config: BlockScaledConfig, *, inference: bool = False, out=None):
    """Quantizes a contiguous CUDA BF16 expert weight ``[G, N, K]`` (W13 ``[E, 2F, D]`` or W2
    ``[E, D, F]``) once into a ``PreparedWeight`` for ``config.format``.

    - MXFP8 training: the registered op ``dist_moe::prepare_mxfp8_weight`` (traceable); E4M3
      ``fprop_data [G, N, K]``, E8M0 ``fprop_scale [G*N, K/32]`` and ``dgrad_scale [G*K, N/32]``
      from 32x32 tiles, and ``dgrad_data [G, K, N]``: the E4M3 codes transposed per expert (where N
      and K are multiples of 128, at shared scales per 128x128 block -- each re-rounded at the largest
      of the block's sixteen tile scales -- for the FP8-blockwise DGRAD), a tensor of its own. That copy is a Hopper departure from upstream, which shares one qdata
      between FPROP and DGRAD: Hopper's E4M3 wgmma reads K-major operands only, so DGRAD (reducing
      over N) reads the transposed copy, one more byte per weight element (training preparations
      only). N and K must be multiples of 32.
    - MXFP8 inference (``inference=True``): 1x32 row blocks, ``dgrad_*`` None.
    - FP8 blockwise (beyond upstream; the registered op ``dist_moe::prepare_fp8_blockwise_weight``
      for training): E4M3 ``fprop_data [G, N, K]``, FP32 ``fprop_scale [G, N/128, K/128]`` from
      128x128 blocks; training adds ``dgrad_data [G, K, N]`` (the codes transposed per expert) and
      ``dgrad_scale [G, K/128, N/128]`` (the scale grid transposed). N and K multiples of 128.
    - NVFP4 (``inference`` irrelevant): packed E2M1 ``[G, N, K/2]``, E4M3 scales ``[G, N, K/16]``,
      FP32 ``global_scale [G]`` and ``global_scale_inv [G]`` = fl(1 / global_scale); K % 16 == 0.
    - ``out=`` (MXFP8 and FP8-blockwise training only): requantizes into ``out``'s storages (all four operands,
      ``dgrad_data`` included) under no-grad on the current stream (CUDA-graph capturable) and
      returns a PreparedWeight sharing them, every data pointer kept, with ``weight`` as its source.
    """
    if not isinstance(config, BlockScaledConfig):
        raise TypeError("config must be a dist_moe.BlockScaledConfig")
    if not isinstance(inference, bool):
        raise TypeError("inference must be a bool")
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise ImportError("prepare_block_scaled_weight needs PyTorch: weights are CUDA torch tensors") from e
    from ._prepare import prepare_block_scaled_weight as _prepare

    return _prepare(weight, str(config.format), inference, out)


def routed_experts(x_TD, topk_expert_ids_TK, topk_scores_TK, w13_weight, w2_weight, context, *, options=None):
    """out[t] = sum_k score[t,k] * W2_e(SwiGLU(W13_e x_t)) over the EP group; collective.

    Returns a fresh BF16 [T, D]. Every rank calls it in the same order with the same T. Gradients
    flow to x, scores, w13 and w2 (in their logical shapes); ids get none. On a block-scaled (MXFP8,
    FP8 blockwise) context the weights are either both ``PreparedWeight`` (training preparations;
    WGRAD flows to their ``source``) or both BF16 tensors, quantized in the call and kept for the
    backward. NVFP4 (inference) contexts take ``PreparedWeight``s only (BF16 weights raise
    ValueError "block-scaled (nvfp4) contexts need prepared weights ...").
    """
    options = resolve_options(options)
    if not isinstance(context, Context):
        raise TypeError("context must be a dist_moe.Context")
    from ._routed import routed_experts as _run

    return _run(x_TD, topk_expert_ids_TK, topk_scores_TK, w13_weight, w2_weight, context, options)
