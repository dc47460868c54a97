"""The in-tree PEP 517 backend (build_backend/dist_moe_build.py): packing and hooks, no compiler.

The compile step is not run here; fake .so files stand in for CMake's output.
"""

import base64
import csv
import hashlib
import importlib.util
import io
import re
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_backend():
    spec = importlib.util.spec_from_file_location("dist_moe_build", ROOT / "build_backend" / "dist_moe_build.py")
    module = importlib.util.module_from_spec(spec)
    # No __pycache__ left in build_backend/ by a test run.
    saved, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = saved
    return module


backend = _load_backend()
VERSION = re.search(r"project\(dist_moe VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text()).group(1)
FAKE_MODULES = {"_native.cpython-399-x86_64-linux-gnu.so": b"\x7fELF native", "_C.cpython-399-x86_64-linux-gnu.so": b"\x7fELF C"}


def _staging(tmp_path):
    staging = tmp_path / "staging"
    staging.mkdir()
    for name, data in FAKE_MODULES.items():
        (staging / name).write_bytes(data)
    (staging / "libstray.a").write_bytes(b"not a module")
    return staging


@pytest.fixture
def wheel(tmp_path):
    name = backend._assemble_wheel(_staging(tmp_path), tmp_path / "dist")
    with zipfile.ZipFile(tmp_path / "dist" / name) as zf:
        yield name, zf


def _read_record(zf):
    dist_info = f"dist_moe-{VERSION}.dist-info"
    return list(csv.reader(io.StringIO(zf.read(f"{dist_info}/RECORD").decode())))


def test_requirement_hooks_are_empty():
    """Neither wheel nor sdist needs anything from an index: both requirement hooks return []."""
    assert backend.get_requires_for_build_wheel() == []
    assert backend.get_requires_for_build_sdist({}) == []


def test_wheel_name_and_tag_are_platform_specific(wheel):
    """The wheel is named dist_moe-<version>-cpXY-cpXY-<platform>.whl and WHEEL says not purelib."""
    name, zf = wheel
    py = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    assert re.fullmatch(rf"dist_moe-{re.escape(VERSION)}-{py}-{py}t?-[a-z0-9_]+\.whl", name), name
    tag = name[len(f"dist_moe-{VERSION}-"):-len(".whl")]
    assert "-" not in tag.split("-", 2)[2] and "." not in tag
    wheel_file = zf.read(f"dist_moe-{VERSION}.dist-info/WHEEL").decode()
    assert "Root-Is-Purelib: false" in wheel_file
    assert f"Tag: {tag}" in wheel_file


def test_record_hashes_and_sizes_match_bytes(wheel):
    """RECORD lists every archive member once, with the urlsafe sha256 and size of its bytes."""
    _, zf = wheel
    rows = _read_record(zf)
    assert sorted(r[0] for r in rows) == sorted(zf.namelist())
    for path, digest, size in rows:
        if path.endswith("/RECORD"):
            assert digest == "" and size == ""
            continue
        data = zf.read(path)
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert digest == f"sha256={expected}", path
        assert int(size) == len(data), path


def test_metadata_name_version_and_extras(wheel):
    """METADATA names dist-moe at the CMakeLists.txt version, with torch only as an extra."""
    _, zf = wheel
    lines = zf.read(f"dist_moe-{VERSION}.dist-info/METADATA").decode().splitlines()
    assert "Name: dist-moe" in lines
    assert f"Version: {VERSION}" in lines
    assert "Provides-Extra: torch" in lines
    assert all("extra ==" in line for line in lines if line.startswith("Requires-Dist:"))
    assert zf.read(f"dist_moe-{VERSION}.dist-info/top_level.txt").decode().split() == ["dist_moe"]


def test_every_package_py_file_is_packed_and_no_csrc(wheel):
    """Every python/dist_moe/**/*.py outside csrc/ is in the wheel, and nothing from csrc/ is."""
    _, zf = wheel
    pkg = ROOT / "python" / "dist_moe"
    expected = {f"dist_moe/{p.relative_to(pkg).as_posix()}" for p in pkg.rglob("*.py")
                if "csrc" not in p.relative_to(pkg).parts and "__pycache__" not in p.parts}
    packed_py = {n for n in zf.namelist() if n.endswith(".py")}
    assert expected and packed_py == expected
    assert not [n for n in zf.namelist() if "/csrc/" in n or n.endswith(".pyc")]
    for name in expected:
        assert zf.read(name) == (pkg / name[len("dist_moe/"):]).read_bytes()


def test_so_files_come_only_from_staging(tmp_path):
    """.so files are taken from the staging dir (bytes intact), never from python/dist_moe or csrc/."""
    fake = tmp_path / "src"
    pkg = fake / "python" / "dist_moe"
    (pkg / "csrc").mkdir(parents=True)
    (pkg / "sub" / "__pycache__").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "mod.py").write_text("X = 1\n")
    (pkg / "sub" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"pyc")
    (pkg / "csrc" / "gen.py").write_text("# a code generator, not part of the package\n")
    (pkg / "csrc" / "core.cpp").write_text("int x;\n")
    (pkg / "_native.cpython-311-x86_64-linux-gnu.so").write_bytes(b"stale in-place build")
    shutil.copy(ROOT / "CMakeLists.txt", fake)
    shutil.copy(ROOT / "pyproject.toml", fake)

    name = backend._assemble_wheel(_staging(tmp_path), tmp_path / "dist", root=fake)
    with zipfile.ZipFile(tmp_path / "dist" / name) as zf:
        members = {n for n in zf.namelist() if not n.startswith("dist_moe-")}
        assert members == {"dist_moe/__init__.py", "dist_moe/sub/mod.py"} | {f"dist_moe/{n}" for n in FAKE_MODULES}
        for so_name, data in FAKE_MODULES.items():
            assert zf.read(f"dist_moe/{so_name}") == data
            assert (zf.getinfo(f"dist_moe/{so_name}").external_attr >> 16) & 0o111, "module not executable"


def test_prepare_metadata_matches_the_wheel(tmp_path, wheel):
    """prepare_metadata_for_build_wheel writes the same METADATA and WHEEL the wheel carries."""
    _, zf = wheel
    dist_info = backend.prepare_metadata_for_build_wheel(str(tmp_path / "meta"))
    assert dist_info == f"dist_moe-{VERSION}.dist-info"
    for name in ("METADATA", "WHEEL"):
        assert (tmp_path / "meta" / dist_info / name).read_bytes() == zf.read(f"{dist_info}/{name}")


def test_toml_fallback_parser_agrees_with_tomllib():
    """The Python 3.10 fallback reads pyproject.toml exactly as tomllib does."""
    tomllib = pytest.importorskip("tomllib")
    text = (ROOT / "pyproject.toml").read_text()
    assert backend._parse_toml_subset(text) == tomllib.loads(text)
    assert backend._parse_toml_subset('a = "x#y" # note\n') == {"a": "x#y"}


def test_configure_command_flags(tmp_path):
    """CMake is configured for a Release, test-free build that writes modules to the staging dir."""
    cmd = backend._configure_command(ROOT, tmp_path / "b", tmp_path / "s", cuda=False, generator=None,
                                     pybind11_dir="/p", nccl_root="/n")
    for flag in ("-DCMAKE_BUILD_TYPE=Release", "-DDIST_MOE_BUILD_TESTS=OFF", "-DDIST_MOE_BUILD_BENCH=OFF",
                 "-DDIST_MOE_BUILD_PYTHON=ON", "-DDIST_MOE_ENABLE_CUDA=OFF", f"-DPython_EXECUTABLE={sys.executable}",
                 "-Dpybind11_DIR=/p", f"-DDIST_MOE_PYTHON_OUTPUT_DIR={tmp_path / 's'}"):
        assert flag in cmd
    assert not any(a.startswith("-DDIST_MOE_NCCL_ROOT") for a in cmd), "NCCL is only needed with CUDA"
    cuda = backend._configure_command(ROOT, tmp_path / "b", tmp_path / "s", cuda=True, generator="Ninja",
                                      pybind11_dir=None, nccl_root="/n")
    assert "-DDIST_MOE_NCCL_ROOT=/n" in cuda and cuda[cuda.index("-G") + 1] == "Ninja"
    assert not any(a.startswith("-Dpybind11_DIR") for a in cuda)


def test_build_targets_follow_cuda_and_override(monkeypatch):
    """dist_moe_torch is built only with CUDA; DIST_MOE_BUILD_TARGETS replaces the list."""
    monkeypatch.delenv("DIST_MOE_BUILD_TARGETS", raising=False)
    assert backend._build_targets(cuda=False) == ["dist_moe_native"]
    assert backend._build_targets(cuda=True) == ["dist_moe_native", "dist_moe_torch"]
    monkeypatch.setenv("DIST_MOE_BUILD_TARGETS", "dist_moe_native")
    assert backend._build_targets(cuda=True) == ["dist_moe_native"]


def test_clean_env_drops_pip_isolation(monkeypatch):
    """Child processes do not inherit the PYTHONPATH/PYTHONNOUSERSITE that hide the venv."""
    monkeypatch.setenv("PYTHONPATH", "/tmp/pip-build-env-x/site")
    monkeypatch.setenv("PYTHONNOUSERSITE", "1")
    env = backend._clean_env()
    assert "PYTHONPATH" not in env and "PYTHONNOUSERSITE" not in env and env["PATH"]


def test_sdist_walk_skips_build_outputs(tmp_path):
    """Without git, the sdist walks the tree, keeps build_backend/ and drops build*/, .so and .pyc."""
    fake = tmp_path / "src"
    for rel in ("CMakeLists.txt", "pyproject.toml", "build_backend/dist_moe_build.py", "python/dist_moe/__init__.py",
                "build/CMakeCache.txt", "build-gpu/x.o", "python/dist_moe/_native.so",
                "python/dist_moe/__pycache__/a.pyc", "src/core/a.cpp"):
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).write_text("x\n")
    shutil.copy(ROOT / "CMakeLists.txt", fake)
    shutil.copy(ROOT / "pyproject.toml", fake)
    name = backend._write_sdist(fake, tmp_path / "sd")
    assert name == f"dist_moe-{VERSION}.tar.gz"
    with tarfile.open(tmp_path / "sd" / name) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames()}
    assert names == {"CMakeLists.txt", "pyproject.toml", "build_backend/dist_moe_build.py",
                     "python/dist_moe/__init__.py", "src/core/a.cpp", "PKG-INFO"}


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_sdist_from_git_keeps_ignored_backend(tmp_path):
    """In a git checkout the sdist holds tracked and new files, plus build_backend/ that /build*/ ignores."""
    import subprocess

    fake = tmp_path / "repo"
    for rel in ("build_backend/dist_moe_build.py", "python/dist_moe/__init__.py", "new_file.txt", "build/junk.o",
                "python/dist_moe/_native.so"):
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).write_text("x\n")
    (fake / ".gitignore").write_text("/build*/\n*.so\n")
    shutil.copy(ROOT / "CMakeLists.txt", fake)
    shutil.copy(ROOT / "pyproject.toml", fake)
    git = ["git", "-C", str(fake), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", ".gitignore", "CMakeLists.txt", "python"], check=True)
    name = backend._write_sdist(fake, tmp_path / "sd")
    with tarfile.open(tmp_path / "sd" / name) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames()}
    assert names == {".gitignore", "CMakeLists.txt", "pyproject.toml", "build_backend/dist_moe_build.py",
                     "python/dist_moe/__init__.py", "new_file.txt", "PKG-INFO"}


def _fake_nccl(root: Path, version: tuple, lib: bool = True) -> Path:
    (root / "include").mkdir(parents=True)
    (root / "include" / "nccl.h").write_text("".join(f"#define NCCL_{p} {v}\n" for p, v in zip(("MAJOR", "MINOR", "PATCH"), version)))
    if lib:
        (root / "lib").mkdir()
        (root / "lib" / "libnccl.so.2").write_bytes(b"\x7fELF")
    return root


def test_nccl_minimum_matches_cmake():
    """The build backend's NCCL minimum is the one cmake/nccl.cmake requires."""
    cmake_min = re.search(r"set\(DIST_MOE_NCCL_MIN_VERSION ([0-9.]+)\)", (ROOT / "cmake" / "nccl.cmake").read_text()).group(1)
    assert backend.NCCL_MIN_VERSION == tuple(int(x) for x in cmake_min.split("."))


def test_nccl_root_needs_the_minimum_and_the_library(tmp_path):
    """An NCCL root counts only with a header at or above the minimum version and the library beside it."""
    assert backend._is_nccl_root(str(_fake_nccl(tmp_path / "ok", (2, 28, 9))))
    assert backend._is_nccl_root(str(_fake_nccl(tmp_path / "newer", (2, 29, 0))))
    assert not backend._is_nccl_root(str(_fake_nccl(tmp_path / "old", (2, 21, 5))))
    assert not backend._is_nccl_root(str(_fake_nccl(tmp_path / "nolib", (2, 28, 9), lib=False)))
    assert not backend._is_nccl_root(str(tmp_path / "missing"))
