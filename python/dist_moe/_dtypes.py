"""Dtype names without importing torch: ``torch.float32`` and ``"float32"`` both map to "float32"."""

from __future__ import annotations

_KNOWN = {
    "bfloat16",
    "float16",
    "float32",
    "int16",
    "int32",
    "int64",
    "float8_e4m3fn",
    "float8_e8m0fnu",
    "float4_e2m1fn_x2",
}
_ALIASES = {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp32": "float32"}


def dtype_name(dtype) -> str | None:
    """Canonical name of a torch dtype or a dtype string; None when it is not a dtype."""
    text = str(dtype)
    if text.startswith("torch."):
        text = text[len("torch.") :]
    text = _ALIASES.get(text, text)
    return text if text in _KNOWN else None
