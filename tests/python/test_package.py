"""Package boundary: the 16 public names, and an import that initializes no CUDA (and, without torch, loads none)."""

import ast
import dataclasses
import pathlib
import re
import subprocess
import sys

import dist_moe
import dist_moe.api

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "dist_moe"

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


def _literal_all(path):
    """The value of a module's top-level ``__all__ = [...]``, which must be a literal list."""
    tree = ast.parse(path.read_text())
    nodes = [n for n in tree.body if isinstance(n, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)]
    assert len(nodes) == 1, f"{path.name}: expected one __all__ assignment"
    assert isinstance(nodes[0].value, ast.List), f"{path.name}: __all__ is not a literal list"
    return ast.literal_eval(nodes[0].value)


def test_root_all_is_a_literal_list_equal_to_api_all():
    """__init__.py and api.py both spell the 16 names as a literal list (upstream's package test
    reads them with ast), in the same order, without duplicates."""
    root, api = _literal_all(PACKAGE / "__init__.py"), _literal_all(PACKAGE / "api.py")
    assert root == api == list(dist_moe.__all__) == list(dist_moe.api.__all__)
    assert len(set(root)) == len(root) and set(root) == EXPECTED


def _slug(heading):
    """GitHub's anchor of a markdown heading: lower case, punctuation but - and _ dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path):
    """Every anchor a markdown file defines: heading slugs and <a id="..."> tags."""
    text = path.read_text()
    return ({_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}
            | set(re.findall(r'<a id="([^"]+)"', text)))


def test_readme_public_api_links_every_root_export():
    """README's "Public API" section links each root export, and only those, as [`name`](target)
    (upstream's test_every_root_export_is_documented); every target file and anchor exists."""
    readme = (ROOT / "README.md").read_text()
    assert "\n## Public API\n" in readme
    section = readme.split("\n## Public API\n", 1)[1].split("\n## ", 1)[0]
    links = re.findall(r"\[`([^`]+)`\]\(([^)]+)\)", section)
    linked = [name.removeprefix("dist_moe.") for name, _ in links]
    assert sorted(linked) == sorted(dist_moe.__all__), "README Public API links must name each root export once"
    for name, target in links:
        file, _, anchor = target.partition("#")
        path = ROOT / file
        assert path.is_file(), f"{name}: {file} does not exist"
        if anchor:
            assert anchor in _anchors(path), f"{name}: no #{anchor} in {file}"


def test_import_initializes_no_cuda():
    """A fresh interpreter importing dist_moe initializes no CUDA. Without torch it loads no torch and no
    CUDA library; with torch it registers the torch.ops.dist_moe ops (upstream's exist right after
    import) and leaves torch's CUDA uninitialized."""
    code = (
        "import importlib.util, sys, dist_moe\n"
        "if importlib.util.find_spec('torch') is None:\n"
        "    assert 'torch' not in sys.modules, 'torch imported'\n"
        "    maps = open('/proc/self/maps').read()\n"
        "    assert 'libcuda.so' not in maps and 'libcudart' not in maps, 'CUDA loaded'\n"
        "else:\n"
        "    import torch\n"
        "    assert hasattr(torch.ops.dist_moe, 'bf16_forward_with_clip_stats'), 'ops not registered'\n"
        "    assert not torch.cuda.is_initialized(), 'CUDA initialized'\n"
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
    with pytest.raises(TypeError, match="config must be a dist_moe.BlockScaledConfig"):
        dist_moe.prepare_block_scaled_weight(None, object())
    with pytest.raises(TypeError, match="inference must be a bool"):
        dist_moe.prepare_block_scaled_weight(None, dist_moe.BlockScaledConfig(), inference=1)
    block_scaled = dataclasses.replace(c, block_scaled=dist_moe.BlockScaledConfig())
    if importlib.util.find_spec("torch") is None:
        with pytest.raises(ImportError, match="PyTorch"):
            dist_moe.create_context(group=None, config=c)
        with pytest.raises(ImportError, match="PyTorch"):  # MXFP8 staged contexts exist: same path as BF16
            dist_moe.create_context(group=None, config=block_scaled)
        with pytest.raises(ImportError, match="PyTorch"):
            dist_moe.prepare_block_scaled_weight(None, dist_moe.BlockScaledConfig())
    else:
        with pytest.raises(TypeError, match="weight must be a torch.Tensor"):
            dist_moe.prepare_block_scaled_weight(None, dist_moe.BlockScaledConfig())


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


def test_package_modules_import_one_way():
    """The package's modules import each other one way (lazy imports inside functions included):
    api -> _routed -> _ops -> _context, and so on; a cycle fails here."""
    pkg = ROOT / "python" / "dist_moe"
    graph = {}
    for path in pkg.glob("*.py"):
        mod = path.stem
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(node.module.split(".")[0])
                else:
                    deps.update(alias.name for alias in node.names)
        graph[mod] = {d for d in deps if (pkg / f"{d}.py").exists() and d != mod}
    graph.pop("__init__", None)  # the package root imports what it exports; nothing imports it back

    state = {}

    def visit(m, stack):
        state[m] = "open"
        for d in sorted(graph.get(m, ())):
            assert state.get(d) != "open", f"import cycle: {' -> '.join(stack + [m, d])}"
            if d not in state:
                visit(d, stack + [m])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def test_production_imports_are_standalone():
    """The package imports only the standard library, torch and itself (upstream's allowed roots minus
    the Blackwell stacks we do not use): no test helper, tool script or stray dependency leaks in."""
    allowed = set(sys.stdlib_module_names) | {"__future__", "torch", "dist_moe"}
    bad = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = [node.module.split(".")[0]]
            else:
                continue
            bad += [f"{path.relative_to(ROOT)}:{node.lineno} imports {r}" for r in roots if r not in allowed]
    assert not bad, bad
