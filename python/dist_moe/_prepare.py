"""Block-scaled weight preparation (torch): ``prepare_block_scaled_weight`` and private helpers.

The layouts are the C++ core's (``_native.prepared_weight_spec``); the GPU work is
``_C.prepare_block_scaled_weight`` on the current CUDA stream, with no host synchronization, so an
``out=`` refill can be captured in a CUDA graph. MXFP8 and FP8-blockwise training go through the
registered ops ``dist_moe::prepare_mxfp8_weight`` / ``prepare_fp8_blockwise_weight`` (traceable:
FakeTensor, ``make_fx``); their refills through the ``..._refill_`` twins. Inference preparations
and NVFP4 run eagerly.

Every field of a PreparedWeight is a tensor of its own. MXFP8 training's ``dgrad_data`` is the
``fprop_data`` codes transposed per expert, ``[G, K, N]``: a Hopper departure from upstream, which
shares one qdata between FPROP and DGRAD on Blackwell. Hopper's E4M3 wgmma reads K-major operands
only, and DGRAD reduces over the weight's N, so its GEMM reads this copy (one more byte per weight
element, training preparations only; inference preparations have no DGRAD fields).

Imported by ``api.prepare_block_scaled_weight`` on first use (this module imports torch).
"""

from __future__ import annotations

import torch

from . import _ops
from ._execution import BlockScaledFormat, PreparedWeight

_MXFP8 = "mxfp8_e4m3"
_NVFP4 = "nvfp4"
_FP8_BLOCKWISE = "fp8_blockwise"  # beyond upstream (BlockScaledFormat.FP8_BLOCKWISE)
_FORMATS = (_MXFP8, _NVFP4, _FP8_BLOCKWISE)


def _format_value(fmt: str):
    """What ``PreparedWeight.format`` holds: the enum member."""
    return BlockScaledFormat(fmt)


def _check_weight(weight) -> None:
    if isinstance(weight, PreparedWeight):
        raise TypeError("weight is already a PreparedWeight; pass the BF16 source tensor")
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight must be a torch.Tensor, got {type(weight).__name__}")
    if weight.dtype != torch.bfloat16:
        raise TypeError(f"weight must have dtype torch.bfloat16, got {weight.dtype}")
    if weight.device.type != "cuda":
        raise ValueError(f"weight must be a CUDA tensor, got device {weight.device}")
    if weight.dim() != 3:
        raise ValueError(f"weight must be 3D [G, N, K] ([E, 2F, D] for W13, [E, D, F] for W2), got shape "
                         f"{tuple(weight.shape)}")
    if not weight.is_contiguous():
        raise ValueError("weight must be contiguous")


def _check_operand(name: str, t, field, device) -> None:
    """A refill target still has the layout the spec says, and its storage still holds it."""
    dtype, shape = field
    if t is None or t.dtype != dtype or tuple(t.shape) != shape or not t.is_contiguous() or t.device != device:
        got = None if t is None else f"{t.dtype} {tuple(t.shape)} on {t.device}"
        raise ValueError(f"out.{name} must be a contiguous {dtype} {shape} tensor on {device}, got {got}")
    needed = (t.storage_offset() + t.numel()) * t.element_size()
    if t.untyped_storage().nbytes() < needed:
        raise ValueError(f"out.{name}'s storage was released (resize_(0)); prepare a new weight instead")


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two contiguous tensors share any byte."""
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + b.numel() * b.element_size() and b0 < a0 + a.numel() * a.element_size()


def prepare_block_scaled_weight(weight, fmt: str, inference: bool = False, out=None) -> PreparedWeight:
    """The body of ``dist_moe.prepare_block_scaled_weight`` (``fmt`` a format name)."""
    if fmt not in _FORMATS:
        raise ValueError(f"unsupported DistMoE block-scaled format: {fmt!r}")
    if not isinstance(inference, bool):
        raise TypeError("inference must be a bool")
    _check_weight(weight)
    if out is not None:
        return _refill(weight, fmt, inference, out)
    spec = _ops.prepared_weight_spec(fmt, inference, weight.shape)  # ValueError on indivisible dims
    source = weight
    if fmt in _ops.TRAINING_PREPARE_OPS and not inference:
        with torch.no_grad():
            tensors = _ops.training_prepare_op(fmt)(weight.detach())
        return PreparedWeight._create(source=source, format=_format_value(fmt),
                                      **dict(zip(_ops.TRAINING_FIELDS, tensors)))
    with torch.no_grad():
        operands = {name: None if spec[name] is None else _ops.empty_prepared(spec[name], weight.device)
                    for name in _ops.PREPARED_FIELDS}
        _ops.launch_prepare(weight.detach(), fmt, inference, operands)
    return PreparedWeight._create(source=source, format=_format_value(fmt), **operands)


def _refill(weight, fmt: str, inference: bool, out) -> PreparedWeight:
    """``out=``: requantizes into ``out``'s storages (MXFP8 and FP8-blockwise training weights:
    fprop_data, fprop_scale, the transposed dgrad_data and dgrad_scale, every pointer kept) and
    returns a PreparedWeight that shares them, with ``weight`` as its source."""
    if not isinstance(out, PreparedWeight):
        raise TypeError(f"out must be a PreparedWeight or None, got {type(out).__name__}")
    if fmt not in _ops.TRAINING_PREPARE_OPS or inference:
        raise ValueError("caller-owned refill supports MXFP8 training weights (and FP8-blockwise ones, beyond upstream)")
    if str(out.format) != fmt:
        raise ValueError(f"out format {out.format!s} does not match the config's format {fmt}")
    if out.dgrad_data is None or out.dgrad_scale is None:
        raise ValueError("caller-owned refill needs a training PreparedWeight: out has no DGRAD operands")
    source = out.source
    if not isinstance(source, torch.Tensor) or source.shape != weight.shape or source.dtype != weight.dtype:
        raise ValueError("out source shape and dtype must match weight")
    spec = _ops.prepared_weight_spec(fmt, False, weight.shape)
    for name in _ops.TRAINING_FIELDS:
        _check_operand(name, getattr(out, name), spec[name], weight.device)
    if _overlap(out.fprop_data, out.dgrad_data):
        raise ValueError("out.dgrad_data must be its own tensor (fprop_data transposed per expert, [G, K, N]), not "
                         "out.fprop_data or a view overlapping it")
    with torch.no_grad():
        _ops.training_refill_op(fmt)(weight.detach(), *(getattr(out, name) for name in _ops.TRAINING_FIELDS))
    return out._with_source(weight)


# ---- private helpers (FP8 blockwise from a checkpoint, per-token NVFP4 rows) -----------------------


def prepare_fp8_blockwise_weight_from_checkpoint(data, scale_inv, *, inference: bool = False) -> PreparedWeight:
    """An FP8 blockwise PreparedWeight from a pre-quantized checkpoint: E4M3 ``data [E, N, K]`` and
    its FP32 128x128 dequantization factors ``scale_inv [E, N/128, K/128]`` are copied as they are
    into fresh operands, plus (training) the transposed copy DGRAD reads. ``source`` is ``data``."""
    if not isinstance(inference, bool):
        raise TypeError("inference must be a bool")
    if not isinstance(data, torch.Tensor) or not isinstance(scale_inv, torch.Tensor):
        raise TypeError("data and scale_inv must be torch.Tensors")
    if data.dtype != torch.float8_e4m3fn:
        raise TypeError(f"data must have dtype torch.float8_e4m3fn, got {data.dtype}")
    if scale_inv.dtype != torch.float32:
        raise TypeError(f"scale_inv must have dtype torch.float32, got {scale_inv.dtype}")
    if data.device.type != "cuda" or scale_inv.device != data.device:
        raise ValueError(f"data and scale_inv must be on one CUDA device, got {data.device} and {scale_inv.device}")
    if data.dim() != 3 or not data.is_contiguous() or not scale_inv.is_contiguous():
        raise ValueError(f"data must be a contiguous 3D [E, N, K] tensor and scale_inv contiguous, got data shape "
                         f"{tuple(data.shape)}")
    spec = _ops.prepared_weight_spec(_FP8_BLOCKWISE, inference, data.shape)
    if tuple(scale_inv.shape) != spec["fprop_scale"][1]:
        raise ValueError(f"scale_inv must have shape {list(spec['fprop_scale'][1])} for data {list(data.shape)}, got "
                         f"{list(scale_inv.shape)}")
    with torch.no_grad():
        operands = {name: None if spec[name] is None else _ops.empty_prepared(spec[name], data.device)
                    for name in _ops.PREPARED_FIELDS}

        def ptr(name):
            return 0 if operands[name] is None else operands[name].data_ptr()

        E, N, K = data.shape
        _ops._gpu().prepare_fp8_blockwise_weight_from_checkpoint(
            _ops.read_ptr(data), _ops.read_ptr(scale_inv), inference, E, N, K, ptr("fprop_data"), ptr("fprop_scale"),
            ptr("dgrad_data"), ptr("dgrad_scale"), _ops._stream(data.device), data.device.index)
    return PreparedWeight._create(source=data, format=_format_value(_FP8_BLOCKWISE), **operands)


def nvfp4_packed_row_bytes(hidden: int) -> int:
    """Bytes of one packed NVFP4 token row: D/2 E2M1x2 + D/16 E4M3 + 4 B FP32 inverse scale, padded
    to 16."""
    return int(_ops._gpu().nvfp4_packed_row_bytes(int(hidden)))


def quantize_nvfp4_token_rows(x_TD, out=None):
    """Per-token NVFP4 quantization of BF16 ``x_TD [T, D]`` into packed uint8 rows
    ``[q D/2 | E4M3 scales D/16 | FP32 token_scale_inv | pad]``. ``out`` (optional) is a uint8
    ``[T, >= nvfp4_packed_row_bytes(D)]`` tensor whose rows may be strided (row stride a multiple of
    16 bytes, elements contiguous): the rows are written in place and ``out`` is returned; bytes of
    ``out`` past the packed row are not touched. D % 64 == 0 and D <= 16384; ``x_TD`` and ``out``
    16-byte aligned (the C++ launcher raises ValueError otherwise). Enqueued on the current stream."""
    if not isinstance(x_TD, torch.Tensor):
        raise TypeError("x_TD must be a torch.Tensor")
    if x_TD.dtype != torch.bfloat16:
        raise TypeError(f"x_TD must have dtype torch.bfloat16, got {x_TD.dtype}")
    if x_TD.device.type != "cuda" or x_TD.dim() != 2 or x_TD.stride(1) != 1:
        raise ValueError(f"x_TD must be a CUDA [T, D] tensor with contiguous rows, got shape {tuple(x_TD.shape)} on "
                         f"{x_TD.device}")
    T, D = x_TD.shape
    row_bytes = nvfp4_packed_row_bytes(D)
    if out is None:
        out = torch.empty((T, row_bytes), dtype=torch.uint8, device=x_TD.device)
    else:
        if not isinstance(out, torch.Tensor) or out.dtype != torch.uint8:
            raise TypeError("out must be a uint8 torch.Tensor")
        if out.device != x_TD.device or out.dim() != 2 or out.shape[0] != T or out.shape[1] < row_bytes or (
            out.stride(1) != 1
        ):
            raise ValueError(f"out must be a uint8 [T={T}, >= {row_bytes}] tensor on {x_TD.device} with contiguous "
                             f"bytes in each row, got shape {tuple(out.shape)}, stride {out.stride()}")
    _ops._gpu().quantize_nvfp4_token_rows(_ops.read_ptr(x_TD), T, D, x_TD.stride(0), out.data_ptr(), out.stride(0),
                                          _ops._stream(x_TD.device), x_TD.device.index)
    return out


_NVFP4_PAIR_MASK = 0x8E008E00  # FP16 bits 9-11 and 15 of both halves


def nvfp4_weight_standard_packing(fprop_data):
    """The standard packing (two E2M1 codes per byte, element 2j in the low nibble) of a prepared
    NVFP4 ``fprop_data``, as uint8 of the same shape. Prepared NVFP4 weights keep each 32-bit word
    of eight codes in the GEMMs' order (docs/formats.md "NVFP4"; ``nvfp4_weight_order.cuh``): the
    word s whose four FP16 code pairs are ``(s << 9)``, ``(s << 6)``, ``(s >> 3 ^ s << 2)`` and
    ``(s ^ s >> 3)`` under the pair mask; this reads the codes back out of them."""
    q = fprop_data.contiguous().view(torch.uint8)
    s = q.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    pairs = (s << 9, s << 6, (s >> 3) ^ (s << 2), s ^ (s >> 3))
    u = torch.zeros_like(s)
    for j, p in enumerate(pairs):
        p = p & _NVFP4_PAIR_MASK
        lo = ((p >> 9) & 7) | ((p >> 12) & 8)
        hi = ((p >> 25) & 7) | ((p >> 28) & 8)
        u |= (lo << (4 * j)) | (hi << (4 * j + 16))
    u = torch.where(u >= 2**31, u - 2**32, u)  # the same 32 bits as a signed word
    return u.to(torch.int32).view(torch.uint8).view(q.shape)


def nvfp4_token_row_views(packed, hidden: int):
    """(q uint8 [T, D/2], scales uint8 [T, D/16], token_scale_inv float32 [T]) views of packed rows."""
    D = int(hidden)
    q = packed[:, : D // 2]
    scales = packed[:, D // 2 : D // 2 + D // 16]
    inv = packed[:, D // 2 + D // 16 : D // 2 + D // 16 + 4].view(torch.float32)[:, 0]
    return q, scales, inv
