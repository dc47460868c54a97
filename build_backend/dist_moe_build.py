"""In-tree PEP 517 build backend for dist-moe, standard library only.

The GPU machines have no network, so pip's isolated build environment cannot fetch setuptools
or scikit-build; this backend has no build requirements. build_wheel runs in two separate steps:

  _compile(staging_dir, build_dir)   CMake builds the extension modules into staging_dir,
  _assemble_wheel(staging_dir, ...)  zips python/dist_moe/**/*.py plus staging_dir/*.so.

Environment knobs (all optional):
  DIST_MOE_BUILD_DIR       reuse this CMake build directory (kept afterwards; default: a temp dir)
  DIST_MOE_BUILD_TARGETS   targets to build, comma/space separated (default: dist_moe_native and,
                           with CUDA, dist_moe_torch)
  DIST_MOE_ENABLE_CUDA     0/OFF forces a host-only build (default: ON when nvcc is found)
  DIST_MOE_PYBIND11_DIR    pybind11's CMake directory
  DIST_MOE_NCCL_ROOT       directory holding include/nccl.h and lib/libnccl.so* (default: the
                           nvidia-nccl wheel of this Python, else CMake's pick, cmake/nccl.cmake)
  CMAKE_BUILD_PARALLEL_LEVEL  build jobs (default: os.cpu_count())
"""

from __future__ import annotations

import base64
import csv
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "dist_moe"  # import name and normalized distribution name

# target -> the module file prefix it must leave in the staging directory
_TARGET_MODULES = {"dist_moe_native": "_native", "dist_moe_torch": "_C"}

# Set by pip's build isolation (and the PEP 517 hook runner). pip points PYTHONPATH at a
# sitecustomize.py that hides the interpreter's site-packages, where pybind11, torch and
# nvidia-nccl live; child processes must not inherit that.
_ISOLATION_VARS = (
    "PYTHONPATH", "PYTHONNOUSERSITE", "PIP_BUILD_TRACKER", "PIP_REQ_TRACKER",
    "_PYPROJECT_HOOKS_BUILD_BACKEND", "_PYPROJECT_HOOKS_BACKEND_PATH",
    "PEP517_BUILD_BACKEND", "PEP517_BACKEND_PATH",
)


# ---- metadata ---------------------------------------------------------------------------------

def _parse_toml_subset(text: str) -> dict:
    """Reads the TOML subset pyproject.toml uses (tables, strings, one-line string arrays).

    Only for Python 3.10, which lacks tomllib; TOML basic strings and arrays of them are valid
    Python literals, so ast.literal_eval reads the values.
    """
    import ast

    data: dict = {}
    table = data
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            table = data
            for part in line[1:-1].strip().split("."):
                table = table.setdefault(part.strip().strip('"'), {})
            continue
        key, _, value = line.partition("=")
        table[key.strip().strip('"')] = ast.literal_eval(_strip_toml_comment(value))
    return data


def _strip_toml_comment(value: str) -> str:
    in_string = escaped = False
    for i, ch in enumerate(value):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "#":
            return value[:i].strip()
    return value.strip()


def _read_pyproject(root: Path) -> dict:
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib
    except ImportError:  # Python 3.10
        return _parse_toml_subset(text)
    return tomllib.loads(text)


def _cmake_version(root: Path) -> str:
    """The single source of the version: project(dist_moe VERSION x.y.z) in CMakeLists.txt."""
    text = (root / "CMakeLists.txt").read_text(encoding="utf-8")
    m = re.search(r"project\(\s*dist_moe\s+VERSION\s+([0-9][0-9A-Za-z.]*)", text)
    if not m:
        raise RuntimeError(f"no 'project(dist_moe VERSION x.y.z' in {root / 'CMakeLists.txt'}")
    return m.group(1)


def _metadata(root: Path) -> dict:
    project = _read_pyproject(root)["project"]
    version = project.get("version") or _cmake_version(root)
    return {
        "name": project["name"],
        "version": version,
        "summary": project.get("description", ""),
        "license": project.get("license", ""),
        "requires_python": project.get("requires-python", ""),
        "dependencies": list(project.get("dependencies", [])),
        "extras": dict(project.get("optional-dependencies", {})),
    }


def _metadata_text(meta: dict) -> str:
    # Metadata-Version 2.1: what every pip in use reads (License-Expression would need 2.4).
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {meta['name']}",
        f"Version: {meta['version']}",
    ]
    if meta["summary"]:
        lines.append(f"Summary: {meta['summary']}")
    if isinstance(meta["license"], str) and meta["license"]:
        lines.append(f"License: {meta['license']}")
    if meta["requires_python"]:
        lines.append(f"Requires-Python: {meta['requires_python']}")
    lines += [f"Requires-Dist: {req}" for req in meta["dependencies"]]
    for extra, reqs in sorted(meta["extras"].items()):
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {req}; extra == "{extra}"' for req in reqs]
    return "\n".join(lines) + "\n"


def _wheel_tag() -> str:
    """cpXY-cpXY-<platform>: the modules are compiled for this interpreter and machine."""
    impl = {"cpython": "cp", "pypy": "pp"}.get(sys.implementation.name, sys.implementation.name)
    py = f"{impl}{sys.version_info[0]}{sys.version_info[1]}"
    abi = py + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else "")
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{py}-{abi}-{plat}"


def _wheel_text(tag: str) -> str:
    return f"Wheel-Version: 1.0\nGenerator: dist_moe_build\nRoot-Is-Purelib: false\nTag: {tag}\n"


def _dist_info(meta: dict) -> str:
    return f"{PACKAGE}-{meta['version']}.dist-info"


def _dist_info_files(meta: dict, tag: str) -> dict:
    return {
        "METADATA": _metadata_text(meta).encode(),
        "WHEEL": _wheel_text(tag).encode(),
        "top_level.txt": f"{PACKAGE}\n".encode(),
    }


# ---- locating the toolchain -------------------------------------------------------------------

def _clean_env() -> dict:
    env = dict(os.environ)
    for var in _ISOLATION_VARS:
        env.pop(var, None)
    return env


_probe_cache: dict | None = None


def _probe_interpreter() -> dict:
    """Asks sys.executable, outside pip's isolation, where pybind11 and nvidia.nccl are.

    The backend process itself cannot import them under isolation, but the same interpreter
    with a clean environment sees its own venv's site-packages.
    """
    global _probe_cache
    if _probe_cache is not None:
        return _probe_cache
    script = (
        "import json, os, sys\n"
        "out = {'pybind11': None, 'nccl': [], 'sys_path': sys.path}\n"
        "try:\n"
        "    import pybind11; out['pybind11'] = pybind11.get_cmake_dir()\n"
        "except Exception: pass\n"
        "try:\n"
        "    import nvidia.nccl as m\n"
        # nvidia.nccl is a namespace package in some wheels: __file__ is None, __path__ is not.
        "    f = getattr(m, '__file__', None)\n"
        "    out['nccl'] = ([os.path.dirname(f)] if f else []) + list(getattr(m, '__path__', []))\n"
        "except Exception: pass\n"
        "print(json.dumps(out))\n"
    )
    _probe_cache = {"pybind11": None, "nccl": [], "sys_path": []}
    try:
        # cwd outside the checkout so '' on sys.path cannot shadow installed packages.
        res = subprocess.run([sys.executable, "-c", script], env=_clean_env(), cwd=tempfile.gettempdir(),
                             capture_output=True, text=True, timeout=120)
        if res.returncode == 0 and res.stdout.strip():
            _probe_cache = json.loads(res.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    return _probe_cache


def _find_pybind11_dir() -> str | None:
    if os.environ.get("DIST_MOE_PYBIND11_DIR"):
        return os.environ["DIST_MOE_PYBIND11_DIR"]
    try:
        import pybind11

        return pybind11.get_cmake_dir()
    except ImportError:
        pass
    if _probe_interpreter().get("pybind11"):
        return _probe_interpreter()["pybind11"]
    if os.path.exists("/usr/bin/python3"):
        try:
            res = subprocess.run(["/usr/bin/python3", "-m", "pybind11", "--cmakedir"], env=_clean_env(),
                                 capture_output=True, text=True, timeout=60)
            if res.returncode == 0 and res.stdout.strip():
                return res.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return None  # CMake's own search (e.g. /usr/lib/cmake/pybind11) decides.


# The oldest NCCL our device-API use runs on: DIST_MOE_NCCL_MIN_VERSION in cmake/nccl.cmake.
NCCL_MIN_VERSION = (2, 28, 0)


def _nccl_header_version(path: str) -> tuple | None:
    """(major, minor, patch) from path/include/nccl.h, or None when it is not there."""
    try:
        text = Path(path, "include", "nccl.h").read_text(errors="replace")
    except OSError:
        return None
    parts = [re.search(rf"^#define NCCL_{p} +([0-9]+)", text, re.M) for p in ("MAJOR", "MINOR", "PATCH")]
    return tuple(int(m.group(1)) for m in parts) if all(parts) else None


def _is_nccl_root(path: str) -> bool:
    """A wheel CMake can take as DIST_MOE_NCCL_ROOT: nccl.h new enough and the library beside it.

    CMake checks the rest (the device-API headers, which it may take from a toolkit copy of the same
    version), so a wheel lacking them fails there with one line rather than silently here.
    """
    version = _nccl_header_version(path)
    has_lib = any(os.path.isfile(os.path.join(path, "lib", n)) for n in ("libnccl.so.2", "libnccl.so"))
    return version is not None and version >= NCCL_MIN_VERSION and has_lib


def _find_nccl_root() -> str | None:
    """NCCL of the pip package nvidia-nccl-*, the one torch loads, so both use the same library.

    Passed to CMake as DIST_MOE_NCCL_ROOT, which makes it the only candidate there: cmake/nccl.cmake
    otherwise takes the newest usable NCCL, and a newer toolkit copy than torch's would not be the
    library torch has already loaded into the process.
    """
    if os.environ.get("DIST_MOE_NCCL_ROOT"):
        return os.environ["DIST_MOE_NCCL_ROOT"]
    candidates = []
    try:
        import nvidia.nccl as m

        candidates += list(getattr(m, "__path__", []))
    except ImportError:
        pass
    probe = _probe_interpreter()
    candidates += probe.get("nccl", [])
    site_dirs = list(probe.get("sys_path", [])) + sys.path + list(getattr(site, "getsitepackages", list)())
    candidates += [os.path.join(d, "nvidia", "nccl") for d in site_dirs if d]
    for path in candidates:
        if _is_nccl_root(path):
            return os.path.abspath(path)
    return None  # CMake then takes the newest usable NCCL it finds (cmake/nccl.cmake).


def _cuda_enabled(env: dict) -> bool:
    """nvcc decides; /usr/local/cuda/bin is added to PATH when nvcc is not on it already."""
    forced = os.environ.get("DIST_MOE_ENABLE_CUDA", "").strip().upper()
    if forced in ("0", "OFF", "NO", "FALSE"):
        return False
    if shutil.which("nvcc", path=env.get("PATH")) or os.environ.get("CUDACXX"):
        return True
    if os.path.isfile("/usr/local/cuda/bin/nvcc"):
        env["PATH"] = os.pathsep.join(filter(None, ["/usr/local/cuda/bin", env.get("PATH")]))
        return True
    return False


# ---- compile ----------------------------------------------------------------------------------

def _configure_command(root: Path, build_dir: Path, staging_dir: Path, *, cuda: bool, generator: str | None,
                       pybind11_dir: str | None, nccl_root: str | None) -> list:
    cmd = ["cmake", "-S", str(root), "-B", str(build_dir)]
    if generator:
        cmd += ["-G", generator]
    cmd += [
        "-DCMAKE_BUILD_TYPE=Release",
        "-DDIST_MOE_BUILD_TESTS=OFF",
        "-DDIST_MOE_BUILD_BENCH=OFF",
        "-DDIST_MOE_BUILD_PYTHON=ON",
        f"-DDIST_MOE_ENABLE_CUDA={'ON' if cuda else 'OFF'}",
        f"-DPython_EXECUTABLE={sys.executable}",
        f"-DDIST_MOE_PYTHON_OUTPUT_DIR={staging_dir}",
    ]
    if pybind11_dir:
        cmd.append(f"-Dpybind11_DIR={pybind11_dir}")
    if cuda and nccl_root:
        cmd.append(f"-DDIST_MOE_NCCL_ROOT={nccl_root}")
    return cmd


def _build_targets(cuda: bool) -> list:
    override = os.environ.get("DIST_MOE_BUILD_TARGETS", "").replace(",", " ").split()
    if override:
        return override
    return ["dist_moe_native"] + (["dist_moe_torch"] if cuda else [])


def _run_logged(step: str, cmd: list, env: dict, log_path: Path) -> str:
    """Runs cmd, streaming its output to stderr (pip -v shows it) and appending it to the log."""
    sys.stderr.write(f"[dist_moe_build] {' '.join(cmd)}\n")
    sys.stderr.flush()
    out = []
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace")
            out.append(line)
            log.write(line)
            sys.stderr.write(line)
            sys.stderr.flush()
        rc = proc.wait()
    if rc != 0:
        raise RuntimeError(f"dist_moe build: CMake {step} failed (exit code {rc}); full output in {log_path}")
    return "".join(out)


def _compile(staging_dir: Path, build_dir: Path, root: Path = ROOT) -> list:
    """Configures and builds the extension targets; returns the .so files left in staging_dir."""
    cmake = shutil.which("cmake")
    if not cmake:
        raise RuntimeError("dist_moe build: cmake (>= 3.24) is not on PATH")
    build_dir.mkdir(parents=True, exist_ok=True)
    # Emptied so the wheel holds only what this build produced (a reused build dir relinks).
    shutil.rmtree(staging_dir, ignore_errors=True)
    staging_dir.mkdir(parents=True)
    log_path = build_dir / "dist_moe_build.log"

    # CMake runs Python_EXECUTABLE (pybind11, find_package(Python)): it must see the real venv.
    env = _clean_env()
    cuda = _cuda_enabled(env)
    # An existing cache keeps its generator (CMake refuses to switch); CMAKE_GENERATOR wins too.
    generator = None
    if not (build_dir / "CMakeCache.txt").exists() and not env.get("CMAKE_GENERATOR") and shutil.which("ninja"):
        generator = "Ninja"
    configure = _configure_command(root, build_dir, staging_dir, cuda=cuda, generator=generator,
                                   pybind11_dir=_find_pybind11_dir(),
                                   nccl_root=_find_nccl_root() if cuda else None)
    configure[0] = cmake
    output = _run_logged("configure", configure, env, log_path)
    skipped = re.search(r"dist_moe Python extension: skipped \(([^)]*)\)", output)
    if skipped:
        raise RuntimeError(f"dist_moe build: CMake skipped the Python extension ({skipped.group(1)}); "
                           f"{sys.executable} needs its development headers and pybind11 (or set DIST_MOE_PYBIND11_DIR). "
                           f"Log: {log_path}")

    targets = _build_targets(cuda)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    _run_logged("build", [cmake, "--build", str(build_dir), "--target", *targets, "-j", jobs], env, log_path)

    modules = sorted(staging_dir.glob("*.so"))
    for target in targets:
        prefix = _TARGET_MODULES.get(target)
        if prefix and not any(p.name.startswith(prefix + ".") for p in modules):
            raise RuntimeError(f"dist_moe build: target {target} left no {prefix}*.so in {staging_dir} "
                               f"(is DIST_MOE_PYTHON_OUTPUT_DIR honoured by cmake/python.cmake?). Log: {log_path}")
    return modules


# ---- pack -------------------------------------------------------------------------------------

def _package_sources(root: Path) -> list:
    """(archive name, path) of every .py file of the package; csrc/ holds C++ sources only."""
    pkg = root / "python" / PACKAGE
    files = []
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg)
        if rel.parts[0] == "csrc" or "__pycache__" in rel.parts:
            continue
        files.append((f"{PACKAGE}/{rel.as_posix()}", path))
    return files


def _zip_time() -> tuple:
    """SOURCE_DATE_EPOCH when set (reproducible wheels), else now; zip cannot store pre-1980."""
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", time.time()))
    return time.gmtime(max(epoch, 315532800))[:6]


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _assemble_wheel(staging_dir, wheel_dir, root: Path = ROOT) -> str:
    """Zips the package .py files, staging_dir/*.so and the dist-info; returns the wheel's name.

    .so files come only from staging_dir: one left in python/dist_moe by an in-place developer
    build may be for another interpreter or stale.
    """
    staging_dir, wheel_dir, root = Path(staging_dir), Path(wheel_dir), Path(root)
    meta = _metadata(root)
    tag = _wheel_tag()
    dist_info = _dist_info(meta)

    entries = [(name, path.read_bytes(), 0o644) for name, path in _package_sources(root)]
    entries += [(f"{PACKAGE}/{p.name}", p.read_bytes(), 0o755) for p in sorted(staging_dir.glob("*.so"))]
    entries += [(f"{dist_info}/{name}", data, 0o644) for name, data in _dist_info_files(meta, tag).items()]

    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data, _ in entries:
        writer.writerow([name, _record_hash(data), len(data)])
    writer.writerow([f"{dist_info}/RECORD", "", ""])
    entries.append((f"{dist_info}/RECORD", record.getvalue().encode(), 0o644))

    wheel_dir.mkdir(parents=True, exist_ok=True)
    wheel_name = f"{PACKAGE}-{meta['version']}-{tag}.whl"
    # Written under a temporary name so an interrupted build never leaves a truncated wheel.
    partial = wheel_dir / (wheel_name + ".part")
    stamp = _zip_time()
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.external_attr = (0o100000 | mode) << 16  # regular file + permissions
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    os.replace(partial, wheel_dir / wheel_name)
    return wheel_name


# ---- sdist ------------------------------------------------------------------------------------

def _walk_sources(root: Path, start: Path) -> list:
    """Relative paths of the files under start, minus build trees, caches and compiled modules."""
    files = []
    for dirpath, dirnames, filenames in os.walk(start):
        rel_dir = Path(dirpath).relative_to(root)
        top = rel_dir == Path(".")
        dirnames[:] = [
            d for d in dirnames
            if d not in (".git", "__pycache__") and not d.endswith(".egg-info")
            and not (top and d.startswith("build") and d != "build_backend")
            and not Path(dirpath, d, "CMakeCache.txt").exists()
        ]
        files += [(rel_dir / f).as_posix() for f in filenames if not f.endswith((".so", ".pyc"))]
    return files


def _source_files(root: Path) -> list:
    """Relative paths for the sdist: git's view of the tree, else a filtered walk."""
    if (root / ".git").exists() and shutil.which("git"):
        # --others --exclude-standard adds new files not committed yet but not ignored.
        res = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True)
        if res.returncode == 0:
            names = {n for n in res.stdout.decode("utf-8", "surrogateescape").split("\0") if n}
            # The backend must travel with the sdist even where a pattern such as /build*/ in
            # .gitignore hides build_backend/ from git.
            if (root / "build_backend").is_dir():
                names.update(_walk_sources(root, root / "build_backend"))
            names.add("pyproject.toml")
            # Tracked files deleted in the working tree are listed too; skip them.
            return sorted(n for n in names if (root / n).is_file() or (root / n).is_symlink())
    return sorted(_walk_sources(root, root))


def _tar_filter(info: tarfile.TarInfo, mtime: int) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = mtime
    return info


def _write_sdist(root: Path, sdist_directory) -> str:
    """tar.gz of the source files under <name>-<version>/ plus the PKG-INFO an sdist must carry."""
    meta = _metadata(root)
    base = f"{PACKAGE}-{meta['version']}"
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", time.time()))
    out_dir = Path(sdist_directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = out_dir / f"{base}.tar.gz.part"
    with open(partial, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=mtime) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in _source_files(root):
            tar.add(root / rel, arcname=f"{base}/{rel}", recursive=False, filter=lambda i: _tar_filter(i, mtime))
        pkg_info = _metadata_text(meta).encode()
        info = _tar_filter(tarfile.TarInfo(f"{base}/PKG-INFO"), mtime)
        info.size, info.mode = len(pkg_info), 0o644
        tar.addfile(info, io.BytesIO(pkg_info))
    os.replace(partial, out_dir / f"{base}.tar.gz")
    return f"{base}.tar.gz"


# ---- PEP 517 hooks ----------------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    meta = _metadata(ROOT)
    dist_info = Path(metadata_directory) / _dist_info(meta)
    dist_info.mkdir(parents=True, exist_ok=True)
    for name, data in _dist_info_files(meta, _wheel_tag()).items():
        (dist_info / name).write_bytes(data)
    return dist_info.name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    keep = os.environ.get("DIST_MOE_BUILD_DIR")
    build_dir = Path(keep).resolve() if keep else Path(tempfile.mkdtemp(prefix="dist-moe-build-"))
    staging_dir = build_dir / "python_staging"
    _compile(staging_dir, build_dir)  # on failure the temp build dir stays for its log
    name = _assemble_wheel(staging_dir, wheel_directory)
    if not keep:
        shutil.rmtree(build_dir, ignore_errors=True)
    return name


def build_sdist(sdist_directory, config_settings=None):
    return _write_sdist(ROOT, sdist_directory)
