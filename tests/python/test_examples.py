"""The public examples: each declares its launch command, and the GPU-free one runs here."""

import ast
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = {
    "memory_planning": "python",
    "bf16_training": "torchrun --standalone --nproc-per-node=2",
    "bf16_inference": "torchrun --standalone --nproc-per-node=2",
    "mxfp8_training": "torchrun --standalone --nproc-per-node=2",
    "block_scaled_inference": "torchrun --standalone --nproc-per-node=2",
}


def test_example_docstrings_declare_exact_launch_commands():
    """Each example's docstring starts with one line `Run: <launcher> examples/<name>.py`."""
    for name, launcher in EXAMPLES.items():
        path = ROOT / "examples" / f"{name}.py"
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc is not None, f"{path} has no docstring"
        first = doc.splitlines()[0]
        assert re.fullmatch(rf"Run: {re.escape(launcher)} examples/{name}\.py", first), (path, first)


def test_memory_planning_example_exits_zero():
    """examples/memory_planning.py needs no GPU and no torch: it prints the plans and exits 0."""
    import dist_moe  # the package this session imports (the checkout's, or an installed one)

    package_root = str(pathlib.Path(dist_moe.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([package_root] + [p for p in sys.path if p]))
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "memory_planning.py")], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("Distributed MoE memory plan:") == 4
    assert "examples/bf16_training.py context, EP2" in proc.stdout
