"""The registered PyTorch operations of Dist-MoE (namespace ``dist_moe``), on the C++ GPU runtime.

Importing this module imports torch and registers the ops; ``dist_moe`` imports it lazily, on the
first ``create_context`` or ``routed_experts``. The CUDA implementations hand raw pointers and the
current CUDA stream to ``dist_moe._C``; nothing synchronizes with the host, so every op can be
captured in a CUDA graph. Every op has a fake implementation for FakeTensor / ``make_fx``.

=============================  =============================================================
op                             use
=============================  =============================================================
``bf16``                       inference, and training contexts under no-grad (scratch only);
                               mutates the context-owned storages and the clip statistics
``bf16_forward``               training forward; returns (out, saved state)
``bf16_forward_with_clip_stats``  the same, also collecting SwiGLU clip statistics; returns (out,
                               saved state, a fresh [3] counter tensor)
``bf16_backward``              functional backward; returns (grad_x, grad_scores, grad_w13,
                               grad_w2) in the inputs' logical shapes
``bf16_backward_accumulate_``  backward that adds WGRAD into existing gradient buffers (args 3
                               and 4); returns (grad_x, grad_scores)
``block_scaled_forward``       block-scaled (MXFP8, FP8 blockwise, NVFP4) forward on prepared
                               operands (5 per weight): training with saved state, or forward
                               only (inference contexts, training contexts under no-grad);
                               returns (out, saved state, empty when nothing is saved)
``block_scaled_backward``      functional block-scaled backward; returns (grad_x, grad_scores,
                               grad_w13 [E, 2F, D], grad_w2 [E, D, F])
``block_scaled_backward_accumulate_``  the same adding WGRAD into existing gradient buffers (args 3
                               and 4); returns (grad_x, grad_scores)
``prepare_mxfp8_weight``       MXFP8 training weight preparation (``torch.library.custom_op``,
                               functional): BF16 [G, N, K] -> (fprop_data E4M3 [G, N, K], FPROP
                               scales E8M0 [G*N, K/32], dgrad_data E4M3 [G, K, N] (the same
                               codes transposed per expert), DGRAD scales E8M0 [G*K, N/32])
``prepare_mxfp8_weight_refill_``  the same into existing operands (``custom_op`` mutating its
                               last four arguments): ``prepare_block_scaled_weight(out=...)``
=============================  =============================================================
"""

from __future__ import annotations

import functools

import torch

from . import _context
from ._native_loader import gpu as _gpu
from ._native_loader import native as _native

# The fused RMSNorm postprocess flattened into scalar op arguments (upstream's order).
_RMSNORM_ARGS = (
    "Tensor? rmsnorm_weight_D, bool rmsnorm_enabled, float rmsnorm_eps, ScalarType rmsnorm_norm_output_dtype, "
    "ScalarType rmsnorm_output_dtype, bool rmsnorm_require_bitwise, float rmsnorm_gain_center, "
    "bool rmsnorm_use_kahan, bool rmsnorm_recompute_rstd"
)
_ROUTING_ARGS = "Tensor x_TD, Tensor topk_expert_ids_TK, Tensor topk_scores_TK, Tensor w13, Tensor w2"

SCHEMAS = {
    "bf16": (
        f"bf16({_ROUTING_ARGS}, {_RMSNORM_ARGS}, Tensor(a!) activation_storage, int activation_slot, "
        "int num_moe_layers_in_slot, Tensor(b!) routing_storage, Tensor(c!) dispatch_storage, "
        "Tensor(d!) combine_storage, Tensor(e!)? swiglu_clip_stats_out_3, float swiglu_clip_limit, "
        "bool validate_expert_ids, str context_id) -> Tensor"
    ),
    # activation_slot -1: a forward whose saved state autograd discards (an activation checkpoint's
    # first forward) keeps nothing in any slot; its backward, if one comes, recomputes from x.
    "bf16_forward": (
        f"bf16_forward({_ROUTING_ARGS}, {_RMSNORM_ARGS}, int activation_slot, int num_moe_layers_in_slot, "
        "bool validate_expert_ids, str context_id) -> (Tensor, Tensor)"
    ),
    "bf16_forward_with_clip_stats": (
        f"bf16_forward_with_clip_stats({_ROUTING_ARGS}, {_RMSNORM_ARGS}, int activation_slot, "
        "int num_moe_layers_in_slot, float swiglu_clip_limit, bool validate_expert_ids, str context_id) "
        "-> (Tensor, Tensor, Tensor)"
    ),
    "bf16_backward": (
        f"bf16_backward(Tensor grad_out_TD, {_ROUTING_ARGS}, Tensor saved_state, {_RMSNORM_ARGS}, "
        "ScalarType wgrad_dtype, str context_id) -> (Tensor, Tensor, Tensor, Tensor)"
    ),
    "bf16_backward_accumulate_": (
        "bf16_backward_accumulate_(Tensor grad_out_TD, Tensor x_TD, Tensor topk_expert_ids_TK, "
        "Tensor(a!) accumulator_grad_w13_EFD, Tensor(b!) accumulator_grad_w2_EDF, Tensor topk_scores_TK, "
        f"Tensor w13, Tensor w2, Tensor saved_state, {_RMSNORM_ARGS}, ScalarType wgrad_dtype, "
        "str context_id) -> (Tensor, Tensor)"
    ),
}

# Block-scaled ops take the prepared operands of both weights, five per weight (PreparedWeight's
# fields in LAYER_OPERAND_FIELDS' order: MXFP8 E4M3 data and E8M0 scales, FP8 blockwise E4M3 data and
# FP32 scales, NVFP4 packed E2M1 data, E4M3 scales and the FP32 inverse expert scale); the forward's
# DGRAD operands are optional (None: an inference preparation, NVFP4 included), global_scale_inv is
# optional everywhere (None except for NVFP4).
_BLOCK_SCALED_OPERANDS = (
    "Tensor w13_fprop_data, Tensor w13_fprop_scale, Tensor{opt} w13_dgrad_data, Tensor{opt} w13_dgrad_scale, "
    "Tensor? w13_global_scale_inv, "
    "Tensor w2_fprop_data, Tensor w2_fprop_scale, Tensor{opt} w2_dgrad_data, Tensor{opt} w2_dgrad_scale, "
    "Tensor? w2_global_scale_inv"
)
_BS_FORWARD_OPERANDS = _BLOCK_SCALED_OPERANDS.format(opt="?")
_BS_BACKWARD_OPERANDS = _BLOCK_SCALED_OPERANDS.format(opt="")
_TOKEN_ARGS = "Tensor x_TD, Tensor topk_expert_ids_TK, Tensor topk_scores_TK"

SCHEMAS.update({
    # save_for_backward False: forward only (inference contexts; training contexts under no-grad,
    # scratch only) and an empty saved state. activation_slot -1 as in bf16_forward.
    "block_scaled_forward": (
        f"block_scaled_forward({_TOKEN_ARGS}, {_BS_FORWARD_OPERANDS}, {_RMSNORM_ARGS}, bool save_for_backward, "
        "int activation_slot, int num_moe_layers_in_slot, bool validate_expert_ids, str context_id) -> (Tensor, Tensor)"
    ),
    "block_scaled_backward": (
        f"block_scaled_backward(Tensor grad_out_TD, {_TOKEN_ARGS}, {_BS_BACKWARD_OPERANDS}, Tensor saved_state, "
        f"{_RMSNORM_ARGS}, ScalarType wgrad_dtype, str context_id) -> (Tensor, Tensor, Tensor, Tensor)"
    ),
    "block_scaled_backward_accumulate_": (
        "block_scaled_backward_accumulate_(Tensor grad_out_TD, Tensor x_TD, Tensor topk_expert_ids_TK, "
        "Tensor(a!) accumulator_grad_w13_EFD, Tensor(b!) accumulator_grad_w2_EDF, Tensor topk_scores_TK, "
        f"{_BS_BACKWARD_OPERANDS}, Tensor saved_state, {_RMSNORM_ARGS}, ScalarType wgrad_dtype, str context_id) "
        "-> (Tensor, Tensor)"
    ),
})

_lib = torch.library.Library("dist_moe", "DEF")
for _schema in SCHEMAS.values():
    _lib.define(_schema)

_DTYPE_NAMES = {
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.float32: "float32",
    torch.int32: "int32",
    torch.int64: "int64",
}


def _dtype_name(dtype) -> str:
    try:
        return _DTYPE_NAMES[dtype]
    except KeyError:
        raise TypeError(f"unsupported dtype {dtype}") from None


def _stream(device: torch.device) -> int:
    return torch.cuda.current_stream(device).cuda_stream


_storage_address = getattr(torch._C, "_data_address", None)  # the storage's const data(); torch >= 2.2


def read_ptr(t: torch.Tensor) -> int:
    """The address of ``t``'s first element, for a tensor the library only reads: taken through the
    storage's const accessor, so a copy-on-write input (``torch._lazy_clone``, or what an operator
    cloned lazily) stays lazy -- ``Tensor.data_ptr()`` is the mutable accessor and would copy it."""
    if _storage_address is None:
        return t.data_ptr()
    return _storage_address(t) + t.storage_offset() * t.element_size()


def _inputs(x, ids, scores, w13, w2) -> dict:
    return {
        "x": read_ptr(x),
        "num_tokens": x.shape[0],
        "ids": read_ptr(ids),
        "id_dtype": _dtype_name(ids.dtype),
        "scores": read_ptr(scores),
        "score_dtype": _dtype_name(scores.dtype),
        "w13": read_ptr(w13),
        "w13_shape": list(w13.shape),
        "w2": read_ptr(w2),
        "w2_shape": list(w2.shape),
    }


def _options(rms: tuple, clip_ptr: int, clip_limit: float, validate: bool, recompute_from_inputs: bool = False) -> dict:
    weight, enabled, eps, norm_dtype, out_dtype, bitwise, gain_center, kahan, recompute = rms
    rmsnorm = None
    if enabled:
        rmsnorm = {
            "eps": eps,
            "norm_output_dtype": _dtype_name(norm_dtype),
            "output_dtype": _dtype_name(out_dtype),
            "require_bitwise": bitwise,
            "weight": 0 if weight is None else read_ptr(weight),
            "weight_dtype": "bfloat16" if weight is None else _dtype_name(weight.dtype),
            "gain_center": gain_center,
            "use_kahan": kahan,
            "recompute_rstd": recompute,
        }
    return {"clip_stats": clip_ptr, "clip_limit": clip_limit, "validate_expert_ids": validate, "rmsnorm": rmsnorm,
            "recompute_from_inputs": recompute_from_inputs}


def _check_storage(name: str, given: torch.Tensor, owned: torch.Tensor) -> None:
    same = (
        given.data_ptr() == owned.data_ptr()
        and given.storage_offset() == owned.storage_offset()
        and given.shape == owned.shape
        and given.stride() == owned.stride()
        and given.dtype == owned.dtype
        and given.device == owned.device
        and given.layout == owned.layout
    )
    if not same:
        raise ValueError(f"{name}_storage does not match the context-owned tensor view")


# ---- dist_moe::bf16 (inference / scratch-only training forward) ---------------------------------


def _bf16_cuda(x, ids, scores, w13, w2, *args):
    rms = args[:9]
    (activation, slot, depth, routing, dispatch, combine, clip, clip_limit, validate, context_id) = args[9:]
    ctx = _context.get_context(context_id)
    for name, given in (("activation", activation), ("routing", routing), ("dispatch", dispatch), ("combine", combine)):
        _check_storage(name, given, ctx._storages[name])
    out = torch.empty((x.shape[0], x.shape[1]), dtype=torch.bfloat16, device=x.device)
    opts = _options(rms, 0 if clip is None else clip.data_ptr(), clip_limit, validate)
    native = ctx._native_context()
    if ctx.config.inference:
        native.inference(_inputs(x, ids, scores, w13, w2), out.data_ptr(), opts, _stream(x.device))
    else:
        native.select_activation_slot(slot, depth)
        native.forward(_inputs(x, ids, scores, w13, w2), out.data_ptr(), 0, opts, _stream(x.device))
    return out


@torch.library.register_fake("dist_moe::bf16", lib=_lib)
def _bf16_fake(x, *args):
    return x.new_empty((x.shape[0], x.shape[1]), dtype=torch.bfloat16)


# ---- dist_moe::bf16_forward (training) ----------------------------------------------------------


def _training_forward(x, ids, scores, w13, w2, rms, slot, depth, stats, clip_limit, validate, context_id):
    """One training forward into a fresh saved-state tensor; slot -1 keeps nothing in any slot."""
    ctx = _context.get_context(context_id)
    native = ctx._native_context()
    out = torch.empty((x.shape[0], x.shape[1]), dtype=torch.bfloat16, device=x.device)
    state = torch.empty((ctx._saved_state_bytes,), dtype=torch.uint8, device=x.device)
    opts = _options(rms, 0 if stats is None else stats.data_ptr(), clip_limit, validate, recompute_from_inputs=slot < 0)
    if slot >= 0:
        native.select_activation_slot(slot, depth)
    native.forward(_inputs(x, ids, scores, w13, w2), out.data_ptr(), state.data_ptr(), opts, _stream(x.device))
    return out, state


def _bf16_forward_cuda(x, ids, scores, w13, w2, *args):
    slot, depth, validate, context_id = args[9:]
    return _training_forward(x, ids, scores, w13, w2, args[:9], slot, depth, None, 7.0, validate, context_id)


def _bf16_forward_with_clip_stats_cuda(x, ids, scores, w13, w2, *args):
    slot, depth, clip_limit, validate, context_id = args[9:]
    stats = torch.empty((3,), dtype=torch.float32, device=x.device)
    out, state = _training_forward(x, ids, scores, w13, w2, args[:9], slot, depth, stats, clip_limit, validate,
                                   context_id)
    return out, state, stats


def _training_forward_fake(x, context_id):
    state_bytes = _context.get_context(context_id)._saved_state_bytes
    return x.new_empty((x.shape[0], x.shape[1]), dtype=torch.bfloat16), x.new_empty((state_bytes,), dtype=torch.uint8)


@torch.library.register_fake("dist_moe::bf16_forward", lib=_lib)
def _bf16_forward_fake(x, ids, scores, w13, w2, *args):
    return _training_forward_fake(x, args[-1])


@torch.library.register_fake("dist_moe::bf16_forward_with_clip_stats", lib=_lib)
def _bf16_forward_with_clip_stats_fake(x, ids, scores, w13, w2, *args):
    return (*_training_forward_fake(x, args[-1]), x.new_empty((3,), dtype=torch.float32))


# ---- backward ------------------------------------------------------------------------------------


def _run_backward(ctx, grad_out, x, scores, inputs, state, rms, wgrad_dtype, gw13, gw2, accumulate):
    """One backward of ``ctx`` on ``inputs`` (a call's input dict) into gw13 / gw2 (added to them
    with ``accumulate``); returns (grad_x, grad_scores)."""
    grad_x = torch.empty_like(x)
    grad_scores = torch.empty_like(scores)
    grads = {
        "grad_x": grad_x.data_ptr(),
        "grad_scores": grad_scores.data_ptr(),
        "grad_w13": gw13.data_ptr(),
        "grad_w2": gw2.data_ptr(),
        "wgrad_dtype": _dtype_name(wgrad_dtype),
        "accumulate": accumulate,
    }
    ctx._native_context().backward(
        inputs,
        state.data_ptr(),
        read_ptr(grad_out),
        grads,
        _options(rms, 0, 7.0, False),
        _stream(x.device),
    )
    return grad_x, grad_scores


def _bf16_backward_cuda(grad_out, x, ids, scores, w13, w2, state, *args):
    rms, (wgrad_dtype, context_id) = args[:9], args[9:]
    gw13 = torch.empty(w13.shape, dtype=wgrad_dtype, device=w13.device)
    gw2 = torch.empty(w2.shape, dtype=wgrad_dtype, device=w2.device)
    gx, gs = _run_backward(_context.get_context(context_id), grad_out, x, scores, _inputs(x, ids, scores, w13, w2),
                           state, rms, wgrad_dtype, gw13, gw2, False)
    return gx, gs, gw13, gw2


@torch.library.register_fake("dist_moe::bf16_backward", lib=_lib)
def _bf16_backward_fake(grad_out, x, ids, scores, w13, w2, state, *args):
    wgrad_dtype = args[9]
    return (
        torch.empty_like(x),
        torch.empty_like(scores),
        w13.new_empty(w13.shape, dtype=wgrad_dtype),
        w2.new_empty(w2.shape, dtype=wgrad_dtype),
    )


def _check_accumulator(name: str, acc: torch.Tensor, weight: torch.Tensor, dtype: torch.dtype) -> None:
    if acc.numel() != weight.numel() or acc.dtype != dtype or acc.device != weight.device or not acc.is_contiguous():
        raise RuntimeError(
            f"{name} must be a contiguous {dtype} tensor of {weight.numel()} elements on {weight.device}, got "
            f"{acc.dtype} {tuple(acc.shape)} on {acc.device} (contiguous={acc.is_contiguous()})"
        )


def _bf16_backward_accumulate_cuda(grad_out, x, ids, acc_w13, acc_w2, scores, w13, w2, state, *args):
    rms, (wgrad_dtype, context_id) = args[:9], args[9:]
    _check_accumulator("accumulator_grad_w13_EFD", acc_w13, w13, wgrad_dtype)
    _check_accumulator("accumulator_grad_w2_EDF", acc_w2, w2, wgrad_dtype)
    return _run_backward(_context.get_context(context_id), grad_out, x, scores, _inputs(x, ids, scores, w13, w2), state,
                         rms, wgrad_dtype, acc_w13, acc_w2, True)


@torch.library.register_fake("dist_moe::bf16_backward_accumulate_", lib=_lib)
def _bf16_backward_accumulate_fake(grad_out, x, ids, acc_w13, acc_w2, scores, *args):
    return torch.empty_like(x), torch.empty_like(scores)


# ---- block-scaled (MXFP8, FP8 blockwise, NVFP4) layer ops ----------------------------------------------
# The operands are PreparedWeight fields (LAYER_OPERAND_FIELDS: fprop_data, fprop_scale, dgrad_data,
# dgrad_scale, global_scale_inv) of W13, then of W2; the binding builds the C++ PreparedExpertWeight
# from them (prepared_weight_spec of the context's format for the source weight's [E, N, K]; an
# operand set without DGRAD fields is an inference preparation) and the layer checks them against
# the context.

# The operands of one weight the layer ops take, in order (five per weight, W13's then W2's).
LAYER_OPERAND_FIELDS = ("fprop_data", "fprop_scale", "dgrad_data", "dgrad_scale", "global_scale_inv")
OPERANDS_PER_WEIGHT = len(LAYER_OPERAND_FIELDS)
NUM_LAYER_OPERANDS = 2 * OPERANDS_PER_WEIGHT

# Formats whose fprop_data packs several values per element along K (NVFP4: two E2M1 per byte).
_VALUES_PER_ELEMENT = {"nvfp4": 2}


def split_operands(operands) -> tuple:
    """The block-scaled ops' operand list as (W13's five, W2's five)."""
    return tuple(operands[:OPERANDS_PER_WEIGHT]), tuple(operands[OPERANDS_PER_WEIGHT:NUM_LAYER_OPERANDS])


def source_shape(fmt: str, data) -> tuple:
    """The [E, N, K] of the BF16 weight a prepared ``fprop_data`` was made from (NVFP4 packs two
    values per element along K)."""
    G, N, K = (int(d) for d in data.shape)
    return G, N, K * _VALUES_PER_ELEMENT.get(fmt, 1)


@functools.lru_cache(maxsize=64)
def _cached_spec(fmt: str, inference: bool, shape: tuple) -> dict:
    return prepared_weight_spec(fmt, inference, shape)


def _check_operands(name: str, operands, fmt: str, device) -> bool:
    """The five operands of one weight have the layout the spec of their source weight's [E, N, K]
    gives (contiguous, on ``device``; global_scale_inv present iff the format has it: FP32 [E] for
    NVFP4); returns whether they are an inference preparation."""
    data = operands[0]
    if data.dim() != 3:
        raise ValueError(f"{name}_fprop_data must be 3D [E, N, K], got shape {tuple(data.shape)}")
    inference = operands[2] is None
    spec = _cached_spec(fmt, inference, source_shape(fmt, data))
    for field, t in zip(LAYER_OPERAND_FIELDS, operands):
        want = spec[field]
        if want is None:
            if t is not None:
                if field == "global_scale_inv":
                    raise ValueError(f"{name}_global_scale_inv must be None: {fmt} weights have no global scale")
                raise ValueError(f"{name}_{field} must be None in an inference preparation (no {name}_dgrad_data)")
            continue
        dtype, shape = want
        if t is None or t.dtype != dtype or tuple(t.shape) != shape or not t.is_contiguous() or t.device != device:
            got = None if t is None else f"{t.dtype} {tuple(t.shape)} on {t.device}"
            raise ValueError(f"{name}_{field} must be a contiguous {dtype} {list(shape)} tensor on {device}, got {got}")
    return inference


def _block_scaled_inputs(ctx, x, ids, scores, operands) -> dict:
    """The call's input dict with the prepared weights of a block-scaled context (no BF16 weights)."""
    if ctx.config.block_scaled is None:
        raise ValueError("block-scaled ops need a block-scaled context (Config.block_scaled is None)")
    if len(operands) != NUM_LAYER_OPERANDS:
        raise ValueError(f"block-scaled ops take {NUM_LAYER_OPERANDS} prepared operands "
                         f"({OPERANDS_PER_WEIGHT} per weight), got {len(operands)}")
    fmt = str(ctx.config.block_scaled.format)
    w13_ops, w2_ops = split_operands(operands)
    inputs = _inputs(x, ids, scores, w13_ops[0], w2_ops[0])
    for name, ops in (("w13", w13_ops), ("w2", w2_ops)):
        inference = _check_operands(name, ops, fmt, x.device)
        inputs[name] = 0
        inputs[f"{name}_prepared"] = {
            "format": fmt,
            "inference": inference,
            "shape": list(source_shape(fmt, ops[0])),
            **{field: 0 if t is None else read_ptr(t) for field, t in zip(LAYER_OPERAND_FIELDS, ops)},
        }
    return inputs


def _block_scaled_forward_cuda(x, ids, scores, *args):
    n = NUM_LAYER_OPERANDS
    operands, rms = args[:n], args[n:n + 9]
    save, slot, depth, validate, context_id = args[n + 9:]
    ctx = _context.get_context(context_id)
    native = ctx._native_context()
    inputs = _block_scaled_inputs(ctx, x, ids, scores, operands)
    out = torch.empty((x.shape[0], x.shape[1]), dtype=torch.bfloat16, device=x.device)
    stream = _stream(x.device)
    if not save:
        opts = _options(rms, 0, 7.0, validate)
        if ctx.config.inference:
            native.inference(inputs, out.data_ptr(), opts, stream)
        else:
            native.select_activation_slot(slot, depth)
            native.forward(inputs, out.data_ptr(), 0, opts, stream)
        return out, torch.empty((0,), dtype=torch.uint8, device=x.device)
    if ctx.config.inference:
        raise RuntimeError("inference contexts do not support autograd")
    state = torch.empty((ctx._saved_state_bytes,), dtype=torch.uint8, device=x.device)
    opts = _options(rms, 0, 7.0, validate, recompute_from_inputs=slot < 0)
    if slot >= 0:
        native.select_activation_slot(slot, depth)
    native.forward(inputs, out.data_ptr(), state.data_ptr(), opts, stream)
    return out, state


@torch.library.register_fake("dist_moe::block_scaled_forward", lib=_lib)
def _block_scaled_forward_fake(x, ids, scores, *args):
    save, context_id = args[NUM_LAYER_OPERANDS + 9], args[-1]
    state_bytes = _context.get_context(context_id)._saved_state_bytes if save else 0
    return x.new_empty((x.shape[0], x.shape[1]), dtype=torch.bfloat16), x.new_empty((state_bytes,), dtype=torch.uint8)


def _split_backward_args(args) -> tuple:
    """A block-scaled backward's arguments after the scores: (operands, saved state, RMSNorm
    scalars, wgrad_dtype, context_id)."""
    n = NUM_LAYER_OPERANDS
    operands, state, rms, (wgrad_dtype, context_id) = args[:n], args[n], args[n + 1:n + 10], args[n + 10:]
    return operands, state, rms, wgrad_dtype, context_id


def _block_scaled_backward_cuda(grad_out, x, ids, scores, *args):
    operands, state, rms, wgrad_dtype, context_id = _split_backward_args(args)
    ctx = _context.get_context(context_id)
    inputs = _block_scaled_inputs(ctx, x, ids, scores, operands)
    w13_ops, w2_ops = split_operands(operands)
    gw13 = torch.empty(w13_ops[0].shape, dtype=wgrad_dtype, device=x.device)
    gw2 = torch.empty(w2_ops[0].shape, dtype=wgrad_dtype, device=x.device)
    gx, gs = _run_backward(ctx, grad_out, x, scores, inputs, state, rms, wgrad_dtype, gw13, gw2, False)
    return gx, gs, gw13, gw2


@torch.library.register_fake("dist_moe::block_scaled_backward", lib=_lib)
def _block_scaled_backward_fake(grad_out, x, ids, scores, *args):
    operands, _state, _rms, wgrad_dtype, _context_id = _split_backward_args(args)
    (w13_data, *_), (w2_data, *_) = split_operands(operands)
    return (
        torch.empty_like(x),
        torch.empty_like(scores),
        x.new_empty(w13_data.shape, dtype=wgrad_dtype),
        x.new_empty(w2_data.shape, dtype=wgrad_dtype),
    )


def _block_scaled_backward_accumulate_cuda(grad_out, x, ids, acc_w13, acc_w2, scores, *args):
    operands, state, rms, wgrad_dtype, context_id = _split_backward_args(args)
    w13_ops, w2_ops = split_operands(operands)
    _check_accumulator("accumulator_grad_w13_EFD", acc_w13, w13_ops[0], wgrad_dtype)
    _check_accumulator("accumulator_grad_w2_EDF", acc_w2, w2_ops[0], wgrad_dtype)
    ctx = _context.get_context(context_id)
    inputs = _block_scaled_inputs(ctx, x, ids, scores, operands)
    return _run_backward(ctx, grad_out, x, scores, inputs, state, rms, wgrad_dtype, acc_w13, acc_w2, True)


@torch.library.register_fake("dist_moe::block_scaled_backward_accumulate_", lib=_lib)
def _block_scaled_backward_accumulate_fake(grad_out, x, ids, acc_w13, acc_w2, scores, *args):
    return torch.empty_like(x), torch.empty_like(scores)


for _name, _fn in (
    ("bf16", _bf16_cuda),
    ("bf16_forward", _bf16_forward_cuda),
    ("bf16_forward_with_clip_stats", _bf16_forward_with_clip_stats_cuda),
    ("bf16_backward", _bf16_backward_cuda),
    ("bf16_backward_accumulate_", _bf16_backward_accumulate_cuda),
    ("block_scaled_forward", _block_scaled_forward_cuda),
    ("block_scaled_backward", _block_scaled_backward_cuda),
    ("block_scaled_backward_accumulate_", _block_scaled_backward_accumulate_cuda),
):
    _lib.impl(_name, _fn, "CUDA")


_EFFECTFUL = ("bf16_forward", "bf16_forward_with_clip_stats", "bf16_backward", "block_scaled_forward",
              "block_scaled_backward")


def _register_effects() -> None:
    """Orders the effectful functional ops for AOT tracing (best effort: a private torch API)."""
    try:
        from torch._higher_order_ops.effects import _EffectType, _register_effectful_op
    except ImportError:  # pragma: no cover - depends on the torch version
        return
    for name in _EFFECTFUL:
        op = getattr(torch.ops.dist_moe, name).default
        try:
            _register_effectful_op(op, _EffectType.ORDERED)
        except Exception:  # pragma: no cover - already registered, or the API changed
            pass


_register_effects()

EFFECTFUL_OPS = tuple(getattr(torch.ops.dist_moe, name).default for name in _EFFECTFUL)


# ---- prepared block-scaled weights ----------------------------------------------------------------
# The layouts come from the C++ core (_native.prepared_weight_spec, include/dist_moe/prepared_weight.h);
# the GPU half (_C.prepare_block_scaled_weight) fills caller-owned tensors on the current stream.

PREPARED_FIELDS = ("fprop_data", "fprop_scale", "dgrad_data", "dgrad_scale", "global_scale", "global_scale_inv")

# float4_e2m1fn_x2 is in torch >= 2.8; without it the packed NVFP4 data stays uint8 (same bytes).
_FP4X2 = getattr(torch, "float4_e2m1fn_x2", None)
_PREPARED_DTYPES = {
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e8m0fnu": torch.float8_e8m0fnu,
    "float32": torch.float32,
    "float4_e2m1fn_x2": _FP4X2 if _FP4X2 is not None else torch.uint8,
}


def prepared_weight_spec(fmt: str, inference: bool, shape) -> dict:
    """The C++ layout of a prepared weight: per field None or (torch dtype, shape tuple), each
    present field its own tensor. ValueError (the C++ text) on dims the format cannot take."""
    if len(shape) != 3:
        raise ValueError(f"block-scaled weight must be 3D [G, N, K], got shape {tuple(shape)}")
    raw = _native().prepared_weight_spec(fmt, bool(inference), *(int(d) for d in shape))
    spec = dict(raw)
    for name in PREPARED_FIELDS:
        if raw[name] is not None:
            dtype_name, dims = raw[name]
            spec[name] = (_PREPARED_DTYPES[dtype_name], tuple(dims))
    return spec


def empty_prepared(field, device) -> torch.Tensor:
    """An uninitialized tensor for one spec field (packed FP4 through a uint8 view where torch
    cannot allocate the dtype directly)."""
    dtype, shape = field
    try:
        return torch.empty(shape, dtype=dtype, device=device)
    except (RuntimeError, TypeError, NotImplementedError):
        if dtype.itemsize != 1:
            raise
        return torch.empty(shape, dtype=torch.uint8, device=device).view(dtype)


def launch_prepare(weight: torch.Tensor, fmt: str, inference: bool, operands: dict) -> None:
    """Enqueues the C++ preparation of ``weight`` into ``operands`` (field -> tensor or None) on
    the current stream of the weight's device."""

    def ptr(name):
        t = operands.get(name)
        return 0 if t is None else t.data_ptr()

    G, N, K = weight.shape
    _gpu().prepare_block_scaled_weight(
        read_ptr(weight), fmt, bool(inference), G, N, K,
        ptr("fprop_data"), ptr("fprop_scale"), ptr("dgrad_data"), ptr("dgrad_scale"),
        ptr("global_scale"), ptr("global_scale_inv"),
        _stream(weight.device), weight.device.index,
    )


# The training operands of a block-scaled weight (MXFP8, FP8 blockwise), in the order the ops
# below return and take them.
TRAINING_FIELDS = ("fprop_data", "fprop_scale", "dgrad_data", "dgrad_scale")


def _define_training_prepare_ops(fmt: str, name: str, doc: str):
    """Registers ``dist_moe::<name>`` (weight -> the four training operands, with a fake
    implementation: FakeTensor / make_fx) and ``dist_moe::<name>_refill_`` (requantizes into
    existing operands, every storage kept) for the format ``fmt``."""

    def prepare(weight):
        spec = prepared_weight_spec(fmt, False, weight.shape)
        operands = {n: empty_prepared(spec[n], weight.device) for n in TRAINING_FIELDS}
        launch_prepare(weight, fmt, False, operands)
        return tuple(operands[n] for n in TRAINING_FIELDS)

    def fake(weight):
        spec = prepared_weight_spec(fmt, False, weight.shape)
        return tuple(weight.new_empty(spec[n][1], dtype=spec[n][0]) for n in TRAINING_FIELDS)

    def refill(weight, fprop_data, fprop_scale, dgrad_data, dgrad_scale):
        launch_prepare(weight, fmt, False, {"fprop_data": fprop_data, "fprop_scale": fprop_scale,
                                            "dgrad_data": dgrad_data, "dgrad_scale": dgrad_scale})

    prepare.__doc__ = doc
    refill.__doc__ = f"Requantizes ``weight`` into a {fmt} training weight's existing operands (same storages)."
    op = torch.library.custom_op(f"dist_moe::{name}", prepare, mutates_args=(), device_types="cuda",
                                 schema="(Tensor weight) -> (Tensor, Tensor, Tensor, Tensor)")
    op.register_fake(fake)
    refill_op = torch.library.custom_op(
        f"dist_moe::{name}_refill_", refill, mutates_args=TRAINING_FIELDS, device_types="cuda",
        schema="(Tensor weight, Tensor(a!) fprop_data, Tensor(b!) fprop_scale, Tensor(c!) dgrad_data, "
        "Tensor(d!) dgrad_scale) -> ()")
    @refill_op.register_fake
    def _(weight, fprop_data, fprop_scale, dgrad_data, dgrad_scale):
        return None

    return op, refill_op


prepare_mxfp8_weight, prepare_mxfp8_weight_refill_ = _define_training_prepare_ops(
    "mxfp8_e4m3", "prepare_mxfp8_weight",
    """MXFP8 training weight: (fprop_data [G, N, K], fprop_scale, dgrad_data [G, K, N], dgrad_scale)
    from 32x32 tiles of ``weight``, one pass. dgrad_data is fprop_data's E4M3 codes transposed per
    expert (at shared scales per 128x128 block where N and K are multiples of 128: the FP8-blockwise
    DGRAD's operand, docs/formats.md), a tensor of its own: a Hopper departure from upstream (one
    qdata for both), as E4M3 wgmma reads K-major operands only.""")

prepare_fp8_blockwise_weight, prepare_fp8_blockwise_weight_refill_ = _define_training_prepare_ops(
    "fp8_blockwise", "prepare_fp8_blockwise_weight",
    """FP8-blockwise training weight (beyond upstream): (fprop_data [G, N, K] E4M3, fprop_scale
    [G, N/128, K/128] FP32, dgrad_data [G, K, N]: the same codes transposed per expert, dgrad_scale
    [G, K/128, N/128]: the scale grid transposed) from 128x128 blocks of ``weight``, one pass.""")

# The registered training preparation of each format that trains.
TRAINING_PREPARE_OPS = {"mxfp8_e4m3": "prepare_mxfp8_weight", "fp8_blockwise": "prepare_fp8_blockwise_weight"}


def training_prepare_op(fmt: str):
    return getattr(torch.ops.dist_moe, TRAINING_PREPARE_OPS[fmt])


def training_refill_op(fmt: str):
    return getattr(torch.ops.dist_moe, TRAINING_PREPARE_OPS[fmt] + "_refill_")
