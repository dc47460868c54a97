"""The torchrun examples under pytest (upstream's test_distributed_example_exits_zero): each runs on
every visible GPU through ``python -m torch.distributed.run`` and exits 0 with its OK line."""

import os
import pathlib
import subprocess
import sys

import pytest
import torch

import dist_moe

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["bf16_training", "bf16_inference", "mxfp8_training", "block_scaled_inference"])
def test_distributed_example_exits_zero(name):
    """examples/<name>.py as its docstring launches it (torchrun, here as a module, one process per
    visible GPU) exits 0 and prints `<name>: OK`, the example's own check against its reference."""
    package_root = str(pathlib.Path(dist_moe.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([package_root] + [p for p in sys.path if p]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={torch.cuda.device_count()}", str(ROOT / "examples" / f"{name}.py")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    assert f"{name}: OK" in proc.stdout, proc.stdout[-2000:]
