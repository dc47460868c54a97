"""Package boundary: the 16 public names, and an import that touches neither torch nor CUDA."""

import subprocess
import sys

import dist_moe
import dist_moe.api

EXPECTED = {
    "Bf16GroupedGemmPreset", "BlockScaledConfig", "BlockScaledFormat", "BlockScaledKernelConfig", "Config",
    "Context", "ExecutionOptions", "MemoryPlan", "PreparedWeight", "RMSNormPostprocess", "VmmConfig",
    "create_context", "plan_memory", "prepare_block_scaled_weight", "routed_experts",
    "supports_fused_post_expert_rmsnorm",
}


def test_every_root_export_is_public():
    """__all__ of the package and of api list exactly upstream's 16 names."""
    assert set(dist_moe.__all__) == EXPECTED
    assert set(dist_moe.api.__all__) == EXPECTED
    for name in EXPECTED:
        assert getattr(dist_moe, name) is getattr(dist_moe.api, name)


def test_import_initializes_neither_torch_nor_cuda():
    """A fresh interpreter importing dist_moe loads no torch and no CUDA library."""
    code = (
        "import sys, dist_moe; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "maps = open('/proc/self/maps').read(); "
        "assert 'libcuda.so' not in maps and 'libcudart' not in maps, 'CUDA loaded'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_gpu_entry_points_fail_clearly_without_torch():
    """Without torch the GPU entry points raise a plain ImportError; bad arguments still fail first."""
    import importlib.util

    import pytest

    c = dist_moe.Config(max_num_local_input_tokens=4, hidden_dim=128, intermediate_dim=128, top_k=2, num_experts=4,
                        max_moe_layers_per_activation_slot=1)
    with pytest.raises(TypeError, match="config must be a dist_moe.Config"):
        dist_moe.create_context(group=None, config=object())
    with pytest.raises(TypeError, match="context must be a dist_moe.Context"):
        dist_moe.routed_experts(None, None, None, None, None, object())
    with pytest.raises(NotImplementedError, match="not implemented on Hopper"):
        dist_moe.prepare_block_scaled_weight(None, dist_moe.BlockScaledConfig())
    if importlib.util.find_spec("torch") is None:
        with pytest.raises(ImportError, match="PyTorch"):
            dist_moe.create_context(group=None, config=c)


def test_native_errors_survive_numpy_being_loaded():
    """A C++ error raised after numpy is loaded arrives as a plain ValueError: the extension must use
    the process's shared libstdc++ (a static copy crashed on the first exception once numpy or torch
    had loaded the shared one)."""
    import importlib.util
    import os

    import pytest

    if importlib.util.find_spec("numpy") is None:
        pytest.skip("numpy is not installed")
    code = (
        "import numpy, dist_moe\n"
        "try:\n"
        "    dist_moe.VmmConfig(total_scratch_capacity_factor=float('nan'))\n"
        "except ValueError as e:\n"
        "    print('raised:', e)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "raised: VmmConfig.total_scratch_capacity_factor must be finite" in proc.stdout
