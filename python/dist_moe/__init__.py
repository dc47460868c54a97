"""Dist-MoE: distributed Mixture-of-Experts for Hopper GPUs (C++/CUDA core, PyTorch front end).

Importing the package initializes neither CUDA nor a process group and does not import torch.
"""

from .api import (
    Bf16GroupedGemmPreset,
    BlockScaledConfig,
    BlockScaledFormat,
    BlockScaledKernelConfig,
    Config,
    Context,
    ExecutionOptions,
    MemoryPlan,
    PreparedWeight,
    RMSNormPostprocess,
    VmmConfig,
    create_context,
    plan_memory,
    prepare_block_scaled_weight,
    routed_experts,
    supports_fused_post_expert_rmsnorm,
)

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

__version__ = "0.1.0"
