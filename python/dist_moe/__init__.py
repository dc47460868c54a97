"""Dist-MoE: distributed Mixture-of-Experts for Hopper GPUs (C++/CUDA core, PyTorch front end).

Importing the package initializes neither CUDA nor a process group. Where torch is installed it is
imported and the ``torch.ops.dist_moe`` operations are registered (as upstream's are right after
import); without torch the config and planning API works alone.
"""

import importlib.util as _importlib_util

from . import api
from .api import *  # noqa: F401,F403 -- exactly the names below (api.__all__)

if _importlib_util.find_spec("torch") is not None:
    from . import _ops  # noqa: F401  (registers the dist_moe:: ops; initializes no CUDA)

# Upstream's 16 root exports, a literal list (README "Public API" links each one);
# tests/python/test_package.py checks that it equals api.__all__.
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
