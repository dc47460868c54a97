"""Loads the C++ extensions: ``dist_moe._native`` (config validation, memory planning; no CUDA,
no torch) and, on first use of a GPU feature, ``dist_moe._C`` (the GPU runtime).

Both are built by CMake next to this file (``scripts/build.sh``) or by ``pip install .``.
"""

from __future__ import annotations

import importlib

_native = None
_gpu = None


def native():
    global _native
    if _native is None:
        try:
            _native = importlib.import_module("dist_moe._native")
        except ImportError as e:  # pragma: no cover - depends on the build
            raise ImportError(
                "dist_moe._native is not built: run scripts/build.sh (CMake builds it when "
                "pybind11 is installed) or pip install . from a checkout"
            ) from e
    return _native


def gpu():
    """The GPU runtime module. torch is imported first so that the NCCL library torch ships is the
    one already loaded when ``_C`` resolves ``libnccl.so.2``."""
    global _gpu
    if _gpu is None:
        import torch  # noqa: F401  (load order: torch's NCCL first)

        try:
            _gpu = importlib.import_module("dist_moe._C")
        except ImportError as e:
            raise ImportError(
                "dist_moe._C (the GPU runtime) is not built: it needs nvcc, NCCL 2.28+ and pybind11 at build "
                f"time (scripts/build.sh, or pip install . on a machine with CUDA): {e}"
            ) from e
    return _gpu
