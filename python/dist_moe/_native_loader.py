"""Loads the C++ core extension ``dist_moe._native`` (config validation, memory planning).

The extension is built by CMake next to this file (``scripts/build.sh``) or by ``pip install``.
Importing it initializes neither CUDA nor torch.
"""

from __future__ import annotations

import importlib

_native = None


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
