"""``routed_experts``: validation, path selection and autograd over the registered ops (torch).

Paths (upstream §1.10):
  - no gradient needed (inference context, no-grad, or no input requires grad): ``dist_moe::bf16``;
  - training: ``_Bf16Function`` over ``dist_moe::bf16_forward`` / ``bf16_backward`` or, with
    ``inplace_wgrad_accum`` and existing ``.grad`` buffers, ``bf16_backward_accumulate_``;
  - block-scaled (MXFP8, FP8 blockwise) contexts: the same over ``dist_moe::block_scaled_forward``
    / ``block_scaled_backward`` / ``block_scaled_backward_accumulate_`` (``_BlockScaledFunction``),
    on the prepared operands of ``PreparedWeight`` arguments or of BF16 weights quantized in the
    call (``dist_moe::prepare_mxfp8_weight`` / ``prepare_fp8_blockwise_weight``); the WGRADs flow to
    the BF16 weights (dynamic) or to ``PreparedWeight.source``;
  - NVFP4 contexts (inference only): ``block_scaled_forward`` without saved state, on the operands
    of ``PreparedWeight`` arguments only (BF16 weights raise: NVFP4 needs prepared weights);
  - Python callbacks (callable postprocess, RMSNorm observers): eager route-level functions over
    the native context, for both kinds of context.
``weights_preprocess_fn`` (eager) materializes the compute weights in forward and again just before
backward (``_Rematerialize``); every path's function keeps what its backward reads through
``_save_layer`` / ``_saved_layer``.
"""

from __future__ import annotations

import torch

from . import _ops  # noqa: F401  (registers the torch.ops.dist_moe ops used below)
from ._ops import NUM_LAYER_OPERANDS, training_prepare_op
from ._context import Context
from ._execution import BlockScaledFormat, PreparedWeight
from ._postprocess import RMSNormPostprocess, validate_rmsnorm_postprocess

_NO_RMSNORM = (None, False, 0.0, torch.float32, torch.float32, True, 0.0, False, False)
_NVFP4 = "nvfp4"
# BF16 weights on an NVFP4 context: NVFP4 is inference with prepared weights only (no registered,
# traceable NVFP4 weight quantizer to run in the call); the C++ layer's text for a call without them.
_NVFP4_NEEDS_PREPARED = (
    "block-scaled (nvfp4) contexts need prepared weights: pass w13 and w2 as PreparedWeight from "
    "prepare_block_scaled_weight(weight, BlockScaledConfig(format=BlockScaledFormat.NVFP4))"
)
_WGRAD_DTYPES = (torch.bfloat16, torch.float32)


def _rmsnorm_args(post) -> tuple:
    """The RMSNorm policy flattened into the ops' scalar arguments (None -> disabled)."""
    if post is None:
        return _NO_RMSNORM
    if not isinstance(post, RMSNormPostprocess):
        raise TypeError("the registered path takes RMSNormPostprocess or None as experts_output_postprocess")
    return (
        post.weight,
        True,
        float(post.eps),
        post.norm_output_dtype,
        post.output_dtype,
        bool(post.require_bitwise),
        float(post.gain_center),
        bool(post.use_kahan),
        bool(post.recompute_rstd),
    )


def _tracing() -> bool:
    if torch.compiler.is_compiling():
        return True
    try:
        from torch.fx.experimental.proxy_tensor import get_proxy_mode

        return get_proxy_mode() is not None
    except ImportError:  # pragma: no cover - torch version dependent
        return False


# ---- WGRAD destinations (upstream §2.8) -----------------------------------------------------------


def _declared_grad_dtype(param):
    # Tensor.grad_dtype (recent torch) defaults to the parameter's dtype; only a different value is
    # a declaration we can tell apart from the default.
    declared = getattr(param, "grad_dtype", None)
    return declared if declared is not None and declared != param.dtype else None


def resolve_wgrad_dtype(param, config_dtype):
    """The WGRAD dtype for a parameter-owned destination: declared, then Config, then the existing
    ``.grad``, then the parameter's dtype; BF16 or FP32."""
    declared = _declared_grad_dtype(param)
    if declared is not None:
        if config_dtype is not None and config_dtype != declared:
            raise RuntimeError(
                f"wgrad_dtype conflicts with the parameter's declared grad_dtype ({config_dtype} vs {declared})"
            )
        dtype = declared
    elif config_dtype is not None:
        dtype = config_dtype
    elif param.grad is not None:
        dtype = param.grad.dtype
    else:
        dtype = param.dtype
    if dtype not in _WGRAD_DTYPES:
        raise TypeError(f"WGRAD dtype must be torch.bfloat16 or torch.float32, got {dtype}")
    if param.grad is not None and param.grad.dtype != dtype:
        raise RuntimeError(
            f"existing parameter gradient dtype does not match the resolved WGRAD dtype ({param.grad.dtype} vs {dtype})"
        )
    return dtype


def _owner(weight, explicit):
    if explicit is not None:
        param = explicit
    elif weight.is_leaf:
        param = weight
    elif weight._base is not None and weight._base.is_leaf:
        param = weight._base
    else:
        raise ValueError("inplace_wgrad_accum requires a view of an autograd leaf")
    if not param.requires_grad:
        raise ValueError("inplace_wgrad_accum: the parameter needs gradients (requires_grad=False)")
    return param


def _accumulator(param, weight):
    grad = param.grad
    if hasattr(grad, "to_local"):  # DTensor: the local shard owns the storage
        grad = grad.to_local()
    if grad.numel() != weight.numel() or not grad.is_contiguous() or grad.device != weight.device:
        raise RuntimeError(
            "inplace_wgrad_accum: the existing .grad must be a contiguous local tensor with the weight's "
            f"shape on {weight.device}, got {tuple(grad.shape)} on {grad.device}"
        )
    return grad.view(weight.shape)


# ---- activation checkpointing: forwards whose saved state autograd discards ------------------------

_SAVING_POLICIES = ("MUST_SAVE", "PREFER_SAVE")


def _selective_checkpoint_policy(op, args):
    """The policy the active selective-checkpoint caching mode gives ``op`` (None without one)."""
    from torch.utils import checkpoint as ckpt
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    caching = getattr(ckpt, "_CachingTorchDispatchMode", None)
    for mode in reversed(_get_current_dispatch_mode_stack()):
        if caching is not None and isinstance(mode, caching):
            policy = mode.policy_fn(ckpt.SelectiveCheckpointContext(is_recompute=False), op, *args)
            if isinstance(policy, bool):
                return "MUST_SAVE" if policy else "PREFER_RECOMPUTE"
            return getattr(policy, "name", str(policy))
    return None


def _saved_state_discarded(op, args) -> bool:
    """True when autograd will drop what this forward saves and run the layer again before its
    backward: the first forward of a non-reentrant ``torch.utils.checkpoint`` region (its saved
    tensors are packed by the checkpoint's hook into placeholders; the recompute saves the real
    ones), unless selective checkpointing caches ``op``'s outputs (then the cached state, this one,
    is what backward uses; ``op`` None: an eager call, never cached). Reentrant checkpointing runs
    its first forward under no-grad (the scratch-only path already). Reads private torch state; on
    any surprise it answers False, the plain behaviour (the layer takes its place in the slot)."""
    try:
        top = torch._C._autograd._top_saved_tensors_default_hooks(True)
        if top is None:
            return False
        pack = top[0]
        if getattr(pack, "__module__", "") != "torch.utils.checkpoint":
            return False
        if not getattr(pack, "__qualname__", "").startswith("_checkpoint_hook."):
            return False  # the recompute's hook, or another one: its saved tensors are kept
        if op is None:  # an eager native call: no torch op that selective checkpointing could cache
            return True
        return _selective_checkpoint_policy(op, args) not in _SAVING_POLICIES
    except Exception:  # pragma: no cover - a torch version without these internals
        return False


def _forward_slot(context, op, args) -> tuple[int, int]:
    """(activation_slot, depth) for a training forward: the selected slot, or -1 (keep nothing in any
    slot) when the forward's saved state is discarded by an activation checkpoint."""
    slot, depth = context.selected_activation_slot
    return (-1 if _saved_state_discarded(op, args) else slot), depth


# ---- autograd -----------------------------------------------------------------------------------------


class _Rematerialize:
    """``weights_preprocess_fn`` run again just before backward: upstream materializes the compute
    weights in forward and again for backward, so between the two the layer holds only the raw
    weights the caller passed (an all-gathered or cast copy is not kept alive). MXFP8 Mega with such
    dynamic weights also quantizes them again there instead of keeping the forward's quantizations
    (upstream's Mega policy, ``_recompute_dynamic_mega_weight_quants``); the staged pipelines keep
    them. The autograd path through the function is the forward's: the backward's weights feed only
    the backward's GEMMs (DGRAD) and, for Mega, its quantizations."""

    def __init__(self, options, raw13, raw2, w13, w2, context):
        self.fn, self.raw13, self.raw2, self.context = options.weights_preprocess_fn, raw13, raw2, context
        self.forward_layout = ((tuple(w13.shape), w13.dtype), (tuple(w2.shape), w2.dtype))
        self.requantize = _recompute_dynamic_mega_weight_quants(context.config, options)

    def __call__(self, saved_operands):
        with torch.no_grad():
            w13, w2 = self.fn(self.raw13), self.fn(self.raw2)
        for name, w, (shape, dtype) in (("w13", w13, self.forward_layout[0]), ("w2", w2, self.forward_layout[1])):
            if not isinstance(w, torch.Tensor) or tuple(w.shape) != shape or w.dtype != dtype:
                got = (tuple(w.shape), w.dtype) if isinstance(w, torch.Tensor) else type(w).__name__
                raise RuntimeError(
                    f"weights_preprocess_fn must return the forward's {name} layout {(shape, dtype)} again before "
                    f"backward, got {got}"
                )
        operands = _dynamic_operands(w13, w2, self.context) if self.requantize else saved_operands
        return w13, w2, operands


def _recompute_dynamic_mega_weight_quants(config, options) -> bool:
    """Whether the backward quantizes the weights again instead of keeping the forward's
    quantizations: training MXFP8 Mega with ``weights_preprocess_fn`` (upstream's policy; NVFP4 and
    prepared weights have no quantization in the call)."""
    bs = config.block_scaled
    return (options.weights_preprocess_fn is not None and not config.inference and bs is not None
            and str(bs.format) == BlockScaledFormat.MXFP8_E4M3 and str(bs.pipeline) == "mega")


def _save_layer(ctx, remat, x, ids, scores, w13, w2, state, operands) -> None:
    """Keep what the layer's backward reads: the inputs, the weights, the saved state and the
    prepared operands -- or, with ``remat``, all but the weights (and, when it requantizes, the
    weights' quantizations), which ``_saved_layer`` materializes again."""
    ctx.remat, ctx.num_operands = remat, len(operands)
    if remat is None:
        ctx.save_for_backward(x, ids, scores, w13, w2, state, *operands)
    else:
        ctx.save_for_backward(x, ids, scores, state, *(() if remat.requantize else operands))


def _saved_layer(ctx) -> tuple:
    """(x, ids, scores, w13, w2, state, operands) as ``_save_layer`` kept them."""
    if ctx.remat is None:
        x, ids, scores, w13, w2, state, *operands = ctx.saved_tensors
        return x, ids, scores, w13, w2, state, tuple(operands)
    x, ids, scores, state, *operands = ctx.saved_tensors
    w13, w2, operands = ctx.remat(tuple(operands))
    return x, ids, scores, w13, w2, state, tuple(operands)


class _Bf16Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, ids, scores, w13, w2, context, options, remat, rms, collect_stats):
        cid, validate = context.context_id, options.validate_expert_ids
        if collect_stats:
            op, tail = torch.ops.dist_moe.bf16_forward_with_clip_stats.default, (float(options.swiglu_clip_limit),)
        else:
            op, tail = torch.ops.dist_moe.bf16_forward.default, ()
        args = [x, ids, scores, w13, w2, *rms, *context.selected_activation_slot, *tail, validate, cid]
        args[14], args[15] = _forward_slot(context, op, args)
        got = op(*args)
        out, state = got[0], got[1]
        stats = got[2] if collect_stats else x.new_empty((0,), dtype=torch.float32)
        _save_layer(ctx, remat, x, ids, scores, w13, w2, state, ())
        ctx.context, ctx.options, ctx.rms = context, options, rms
        ctx.mark_non_differentiable(stats)
        return out, stats

    @staticmethod
    def backward(ctx, grad_out, _grad_stats):
        x, ids, scores, w13, w2, state, _ = _saved_layer(ctx)
        rms, cid = ctx.rms, ctx.context.context_id
        grad_out = grad_out.to(torch.bfloat16).contiguous()

        def functional(dtype):
            return torch.ops.dist_moe.bf16_backward(grad_out, x, ids, scores, w13, w2, state, *rms, dtype, cid)

        def accumulate(acc13, acc2, dtype):
            return torch.ops.dist_moe.bf16_backward_accumulate_(grad_out, x, ids, acc13, acc2, scores, w13, w2, state,
                                                                *rms, dtype, cid)

        gx, gs, g13, g2 = _layer_backward(ctx.context, ctx.options, w13, w2, functional, accumulate)
        return gx, None, gs, g13, g2, None, None, None, None, None


class _BlockScaledFunction(torch.autograd.Function):
    """Block-scaled training over ``block_scaled_forward`` / ``block_scaled_backward(_accumulate_)``.

    ``w13`` / ``w2`` are the BF16 tensors the WGRADs flow to (dynamic weights in their logical
    shapes, or ``PreparedWeight.source``); ``operands`` the ten prepared tensors (or None) the ops
    read (W13's fprop_data, fprop_scale, dgrad_data, dgrad_scale, global_scale_inv, then W2's),
    never differentiated."""

    @staticmethod
    def forward(ctx, x, ids, scores, w13, w2, context, options, remat, rms, *operands):
        op = torch.ops.dist_moe.block_scaled_forward.default
        args = [x, ids, scores, *operands, *rms, True, *context.selected_activation_slot, options.validate_expert_ids,
                context.context_id]
        slot = 3 + NUM_LAYER_OPERANDS + len(rms) + 1  # after x, ids, scores, the operands, RMSNorm, save
        args[slot], args[slot + 1] = _forward_slot(context, op, args)
        out, state = op(*args)
        _save_layer(ctx, remat, x, ids, scores, w13, w2, state, operands)
        ctx.context, ctx.options, ctx.rms = context, options, rms
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, ids, scores, w13, w2, state, operands = _saved_layer(ctx)
        rms, cid = ctx.rms, ctx.context.context_id
        grad_out = grad_out.to(torch.bfloat16).contiguous()

        def functional(dtype):
            gx, gs, g13, g2 = torch.ops.dist_moe.block_scaled_backward(grad_out, x, ids, scores, *operands, state, *rms,
                                                                       dtype, cid)
            return gx, gs, g13.view(w13.shape), g2.view(w2.shape)

        def accumulate(acc13, acc2, dtype):
            return torch.ops.dist_moe.block_scaled_backward_accumulate_(grad_out, x, ids, acc13, acc2, scores,
                                                                        *operands, state, *rms, dtype, cid)

        gx, gs, g13, g2 = _layer_backward(ctx.context, ctx.options, w13, w2, functional, accumulate)
        return (gx, None, gs, g13, g2, None, None, None, None, *(None for _ in range(ctx.num_operands)))


def _layer_backward(context, options, w13, w2, functional, accumulate):
    """A training backward's WGRAD policy over the layer's backward ops: ``functional(dtype)`` ->
    (gx, gs, g13, g2) in the weights' logical shapes, ``accumulate(acc13, acc2, dtype)`` -> (gx, gs)
    adding into the accumulators. Returns (gx, gs, g13, g2); the WGRADs are None when they went into
    ``.grad`` or a destination instead of autograd."""
    if options.wgrad_destination_fn is not None:
        return _backward_to_destinations(context, options, w13, w2, functional, accumulate)
    if options.inplace_wgrad_accum:
        config_dtype = context.config.wgrad_dtype
        owners = options.wgrad_parameter_owners or (None, None)
        p13, p2 = _owner(w13, owners[0]), _owner(w2, owners[1])
        d13, d2 = resolve_wgrad_dtype(p13, config_dtype), resolve_wgrad_dtype(p2, config_dtype)
        if d13 != d2:
            raise RuntimeError(f"W13 and W2 resolve to different WGRAD dtypes ({d13} vs {d2})")
        if p13.grad is not None and p2.grad is not None:
            gx, gs = accumulate(_accumulator(p13, w13), _accumulator(p2, w2), d13)
            return gx, gs, None, None
        wgrad_dtype = d13
    else:
        wgrad_dtype = _config_wgrad_dtype(context, w13)
    gx, gs, g13, g2 = functional(wgrad_dtype)
    g13, g2 = _postprocessed_wgrads(options, g13, g2)
    return gx, gs, g13, g2


def _backward_to_destinations(context, options, w13, w2, functional, accumulate):
    """``wgrad_destination_fn``: the integration owns both WGRAD buffers (eager only)."""
    dtype = _config_wgrad_dtype(context, w13)
    dests = []
    for name, w in (("w13", w13), ("w2", w2)):
        got = options.wgrad_destination_fn(name, w.shape, dtype, w.device)
        if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], torch.Tensor) and isinstance(got[1], bool)):
            raise TypeError("wgrad_destination_fn must return (Tensor, bool)")
        dest, _ = got
        if dest.shape != w.shape or dest.dtype != dtype or dest.device != w.device or not dest.is_contiguous():
            raise RuntimeError(f"wgrad_destination_fn must return a contiguous tensor of the requested shape, dtype, and device for {name}")
        dests.append(got)
    (d13, acc13), (d2, acc2) = dests
    if acc13 and acc2:
        gx, gs = accumulate(d13, d2, dtype)
    else:
        gx, gs, g13, g2 = functional(dtype)
        for dest, acc, g in ((d13, acc13, g13), (d2, acc2, g2)):
            dest.add_(g) if acc else dest.copy_(g)
    return gx, gs, None, None


# ---- callable postprocess (eager): the experts give route rows, torch does the rest ----------------


def _config_wgrad_dtype(context, w13):
    """The WGRAD dtype of functional backward: the context's, else the weights'."""
    return context.config.wgrad_dtype if context.config.wgrad_dtype is not None else w13.dtype


def _postprocessed_wgrads(options, g13, g2):
    """``wgrad_postprocess_fn`` applied, w2 first, as its WGRAD is produced first."""
    if options.wgrad_postprocess_fn is not None:
        g2 = options.wgrad_postprocess_fn("w2", g2)
        g13 = options.wgrad_postprocess_fn("w13", g13)
    return g13, g2


# ---- route-level I/O of the native context (eager) -------------------------------------------------


def _layer_inputs(context, x, ids, scores, w13, w2, operands):
    """A call's input dict: the BF16 weights, or the prepared operands of a block-scaled context."""
    if operands:
        return _ops._block_scaled_inputs(context, x, ids, scores, operands)
    return _ops._inputs(x, ids, scores, w13, w2)


def _native_forward_with_routes(x, ids, scores, w13, w2, context, options, rms, save, operands=()):
    """One eager forward (or inference) of the native context that also exports this rank's route
    rows h3 [T, K, D] BF16 (``operands``: the prepared operands of a block-scaled context, else
    empty). Returns (out [T, D], h3, state); state is the saved-state buffer when ``save`` outside
    inference, else None."""
    native = context._native_context()
    T, K, D = x.shape[0], ids.shape[1], x.shape[1]
    out = torch.empty((T, D), dtype=torch.bfloat16, device=x.device)
    h3 = torch.empty((T, K, D), dtype=torch.bfloat16, device=x.device)
    stats = options.swiglu_clip_stats_out_3
    opts = _ops._options(rms, 0 if stats is None else stats.data_ptr(), float(options.swiglu_clip_limit),
                         options.validate_expert_ids)
    opts["expert_output"] = h3.data_ptr()
    inputs = _layer_inputs(context, x, ids, scores, w13, w2, operands)
    stream = _ops._stream(x.device)
    if context.config.inference:
        native.inference(inputs, out.data_ptr(), opts, stream)
        return out, h3, None
    state = torch.empty((native.saved_state_bytes,), dtype=torch.uint8, device=x.device) if save else None
    slot, depth = _forward_slot(context, None, ()) if save else context.selected_activation_slot
    opts["recompute_from_inputs"] = slot < 0
    if slot >= 0:
        native.select_activation_slot(slot, depth)
    native.forward(inputs, out.data_ptr(), 0 if state is None else state.data_ptr(), opts, stream)
    return out, h3, state


def _native_backward_with_routes(ctx, rms, grad_out, route_opts, with_grad_scores):
    """One eager backward of the native context for the route-level functions below (ctx holds the
    layer tensors of ``_save_layer``, and context, options; the WGRADs take w13 / w2's shapes).
    grad_out: the BF16 [T, D] output gradient, or None when the route gradient comes in through
    ``route_opts``; route_opts: the route-level entries of the options. Returns (gx, gs or None, g13,
    g2), WGRAD not postprocessed."""
    x, ids, scores, w13, w2, state, operands = _saved_layer(ctx)
    context = ctx.context
    dtype = _config_wgrad_dtype(context, w13)
    gx = torch.empty_like(x)
    gs = torch.empty_like(scores) if with_grad_scores else None
    g13 = torch.empty(w13.shape, dtype=dtype, device=w13.device)
    g2 = torch.empty(w2.shape, dtype=dtype, device=w2.device)
    grads = {"grad_x": gx.data_ptr(), "grad_scores": 0 if gs is None else gs.data_ptr(), "grad_w13": g13.data_ptr(),
             "grad_w2": g2.data_ptr(), "wgrad_dtype": _ops._dtype_name(dtype), "accumulate": False}
    opts = _ops._options(rms, 0, 7.0, False)
    opts.update(route_opts)
    context._native_context().backward(_layer_inputs(context, x, ids, scores, w13, w2, operands), state.data_ptr(),
                                       0 if grad_out is None else _ops.read_ptr(grad_out), grads, opts,
                                       _ops._stream(x.device))
    return gx, gs, g13, g2


class _ExpertRoutesFunction(torch.autograd.Function):
    """(x, w13, w2) -> this rank's route rows h3 [T, K, D] BF16: the experts without the top-k
    reduction, for a postprocess the caller runs. Backward takes grad_h3 straight into the library's
    backward (route-level I/O of the C++ pipeline); score gradients come from the caller's reduction."""

    @staticmethod
    def forward(ctx, x, ids, scores, w13, w2, context, options, remat, save, *operands):
        # out: the library's reduction, unused
        _out, h3, state = _native_forward_with_routes(x, ids, scores, w13, w2, context, options, _NO_RMSNORM, save,
                                                      operands)
        if save and not context.config.inference:
            _save_layer(ctx, remat, x, ids, scores, w13, w2, state, operands)
            ctx.context, ctx.options = context, options
        return h3

    @staticmethod
    def backward(ctx, grad_h3):
        grad_h3 = grad_h3.to(torch.bfloat16).contiguous()
        gx, _gs, g13, g2 = _native_backward_with_routes(ctx, _NO_RMSNORM, None,
                                                        {"grad_expert_output": _ops.read_ptr(grad_h3)}, False)
        g13, g2 = _postprocessed_wgrads(ctx.options, g13, g2)
        return (gx, None, None, g13, g2, None, None, None, None, *(None for _ in range(ctx.num_operands)))


class _ObservedRmsnormFunction(torch.autograd.Function):
    """The fused layer with the RMSNorm postprocess, eager, handing this rank's route rows h3
    [T, K, D] to ``observe_expert_output_fn`` and their gradient to ``observe_expert_output_grad_fn``
    (route-level export of the C++ pipeline; the reduction stays fused)."""

    @staticmethod
    def forward(ctx, x, ids, scores, w13, w2, context, options, remat, rms, save, *operands):
        post = options.experts_output_postprocess
        out, h3, state = _native_forward_with_routes(x, ids, scores, w13, w2, context, options, rms, save, operands)
        if post.observe_expert_output_fn is not None:
            post.observe_expert_output_fn(_padded_rows_zeroed(h3, ids, options))
        if save:
            _save_layer(ctx, remat, x, ids, scores, w13, w2, state, operands)
            ctx.context, ctx.options, ctx.rms = context, options, rms
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, ids = ctx.saved_tensors[0], ctx.saved_tensors[1]  # first in both of _save_layer's forms
        post = ctx.options.experts_output_postprocess
        grad_out = grad_out.to(torch.bfloat16).contiguous()
        gh3 = torch.empty((x.shape[0], ids.shape[1], x.shape[1]), dtype=torch.bfloat16, device=x.device)
        gx, gs, g13, g2 = _native_backward_with_routes(ctx, ctx.rms, grad_out,
                                                       {"grad_expert_output_out": gh3.data_ptr()}, True)
        if post.observe_expert_output_grad_fn is not None:
            post.observe_expert_output_grad_fn(gh3)
        g13, g2 = _postprocessed_wgrads(ctx.options, g13, g2)
        return (gx, None, gs, g13, g2, None, None, None, None, None, *(None for _ in range(ctx.num_operands)))


def _padded_rows_zeroed(h3, ids, options):
    """h3 as observers and callbacks see it: -1 rows zeroed when the options ask for it."""
    if not options.zero_out_padded_callback_inputs:
        return h3
    return h3.masked_fill((ids < 0).unsqueeze(-1), 0)


def _check_callback_output(y, h3) -> None:
    if not isinstance(y, torch.Tensor):
        raise TypeError("experts_output_postprocess must return a tensor")
    if y.shape != h3.shape:
        raise ValueError(f"experts_output_postprocess must preserve route shape {tuple(h3.shape)}, got {tuple(y.shape)}")
    if y.device != h3.device:
        raise ValueError(f"experts_output_postprocess must keep the device {h3.device}, got {y.device}")
    if not y.is_contiguous():
        raise ValueError("experts_output_postprocess must return a contiguous tensor")
    if y.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(f"experts_output_postprocess must return float16, bfloat16, or float32, got {y.dtype}")


def _routed_with_callable(x, ids, scores, w13, w2, context, options, save, operands=(), remat=None):
    """out[t] = sum_k s[t,k] * f(h3[t,k]) in FP32 over valid routes, f the caller's postprocess."""
    if save and (options.inplace_wgrad_accum or options.wgrad_destination_fn is not None):
        raise ValueError(
            "a callable experts_output_postprocess supports functional WGRAD (optionally wgrad_postprocess_fn) only"
        )
    h3 = _ExpertRoutesFunction.apply(x, ids, scores, w13, w2, context, options, remat, save, *operands)
    valid = (ids >= 0).unsqueeze(-1)
    h3 = _padded_rows_zeroed(h3, ids, options)
    y = options.experts_output_postprocess(h3)
    _check_callback_output(y, h3)
    y = torch.where(valid, y.float(), torch.zeros((), dtype=torch.float32, device=y.device))
    return (y * scores.float().unsqueeze(-1)).sum(dim=1).to(x.dtype)


# ---- block-scaled weights ----------------------------------------------------------------------------


def _prepared_operands(w) -> tuple:
    """A PreparedWeight's operands in the block-scaled ops' order (``_ops.LAYER_OPERAND_FIELDS``;
    global_scale_inv None except for NVFP4)."""
    return w.fprop_data, w.fprop_scale, w.dgrad_data, w.dgrad_scale, w.global_scale_inv


def _expert_weights_3d(w13, w2, context):
    """Dynamic BF16 weights in any of upstream's layouts as [E_local, 2F, D] and [E_local, D, F]
    (views; upstream's _reshape_weights and the C++ layout checks, with their messages)."""
    cfg = context.config
    L, D, F = context._native_context().local_experts, cfg.hidden_dim, cfg.intermediate_dim
    if w13.dim() == 2 and w2.dim() == 2:
        if w13.numel() != L * 2 * F * D or w13.shape[-1] != D:
            raise ValueError(f"w13 must hold [{L}, {2 * F}, {D}] elements")
        if w2.numel() != L * D * F or w2.shape[-1] != F:
            raise ValueError(f"w2 must hold [{L}, {D}, {F}] elements")
        return w13.view(L, 2 * F, D), w2.view(L, D, F)
    if w13.dim() == 4 and w2.dim() == 3:
        if w13.shape[1] != 2:
            raise ValueError("gate-axis w13 must have shape [E, 2, F, D]")
        w13 = w13.reshape(w13.shape[0], 2 * w13.shape[2], w13.shape[3])
    elif not (w13.dim() == 3 and w2.dim() == 3):
        raise ValueError("w13 and w2 use incompatible expert-weight layouts")
    if w13.shape[0] != L or w2.shape[0] != L:
        raise ValueError(f"weights must contain {L} local experts, got w13 {w13.shape[0]} and w2 {w2.shape[0]}")
    if tuple(w13.shape) != (L, 2 * F, D):
        raise ValueError(f"w13 must hold [{L}, {2 * F}, {D}] elements")
    if tuple(w2.shape) != (L, D, F):
        raise ValueError(f"w2 must hold [{L}, {D}, {F}] elements")
    return w13, w2


def _dynamic_operands(w13, w2, context) -> tuple:
    """BF16 weights quantized for this call (training preparations of the context's format, through
    the registered ``prepare_mxfp8_weight`` / ``prepare_fp8_blockwise_weight``: traceable,
    graph-capturable), in the block-scaled ops' order (no global scales); the operands are kept for
    the backward. NVFP4 has no in-call quantization (``routed_experts`` rejects BF16 weights there)."""
    a, b = _expert_weights_3d(w13, w2, context)
    prepare = training_prepare_op(str(context.config.block_scaled.format))
    with torch.no_grad():
        q13 = prepare(a.detach())
        q2 = prepare(b.detach())
    return (*q13, None, *q2, None)


# ---- the public entry point ------------------------------------------------------------------------


def _check_tensors(x, ids, scores, w13, w2, context) -> None:
    if x.dtype != torch.bfloat16:
        raise TypeError(f"x_TD must be bfloat16, got {x.dtype}")
    if w13.dtype != torch.bfloat16 or w2.dtype != torch.bfloat16:
        raise TypeError(f"w13 and w2 must be bfloat16, got {w13.dtype} and {w2.dtype}")
    if ids.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"topk_expert_ids_TK must be int32 or int64, got {ids.dtype}")
    if scores.dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"topk_scores_TK must be bfloat16 or float32, got {scores.dtype}")
    for name, t in (("x_TD", x), ("topk_expert_ids_TK", ids), ("topk_scores_TK", scores), ("w13", w13), ("w2", w2)):
        if t.device != context.device:
            raise ValueError(f"{name} must be on the context's device {context.device}, got {t.device}")
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")


def routed_experts(x_TD, topk_expert_ids_TK, topk_scores_TK, w13_weight, w2_weight, context, options):
    if not isinstance(context, Context):
        raise TypeError("context must be a dist_moe.Context")
    context._check_open()
    cfg = context.config
    x, ids, scores = x_TD, topk_expert_ids_TK, topk_scores_TK
    stats = options.swiglu_clip_stats_out_3
    if stats is not None and stats.device != x.device:
        raise ValueError("swiglu_clip_stats_out_3 must be on the Dist-MoE input device")
    block_scaled = cfg.block_scaled is not None
    if stats is not None and block_scaled:
        raise ValueError("SwiGLU clip statistics are supported only by BF16")
    D, K, T_max = cfg.hidden_dim, cfg.top_k, cfg.max_num_local_input_tokens
    if x.dim() != 2 or x.shape[1] != D:
        raise ValueError(f"x_TD must have shape [T, {D}], got {tuple(x.shape)}")
    T = x.shape[0]
    if not 1 <= T <= T_max:
        raise ValueError(f"local input token count must be in [1, context.max_num_local_input_tokens={T_max}], got {T}")
    for name, t in (("topk_expert_ids_TK", ids), ("topk_scores_TK", scores)):
        if tuple(t.shape) != (T, K):
            raise ValueError(f"{name} must have shape [T, K]=[{T}, {K}], got {tuple(t.shape)}")
    prepared = [isinstance(w, PreparedWeight) for w in (w13_weight, w2_weight)]
    if any(prepared):
        if not all(prepared):
            raise TypeError("w13_weight and w2_weight must both be PreparedWeight or both be tensors")
        if cfg.block_scaled is None:
            raise ValueError("prepared block-scaled weights cannot be used with a BF16 context")
        if options.weights_preprocess_fn is not None:
            raise ValueError("prepared block-scaled weights cannot be combined with weights_preprocess_fn")
    elif block_scaled and str(cfg.block_scaled.format) == _NVFP4:
        raise ValueError(_NVFP4_NEEDS_PREPARED)

    post = options.experts_output_postprocess
    if options.requires_eager:
        if _tracing():
            raise RuntimeError("DistMoE Python weight, expert-output, and WGRAD callbacks require eager execution")
    raw_weights = None
    if options.weights_preprocess_fn is not None:  # materialized here, and again before backward
        raw_weights = (w13_weight, w2_weight)
        w13_weight = options.weights_preprocess_fn(w13_weight)
        w2_weight = options.weights_preprocess_fn(w2_weight)
    if all(prepared):
        # WGRAD flows to the sources. Inference contexts read only the operands (no autograd state):
        # a source that requires grad (a parameter) does not make the call an autograd call there.
        fmt = str(cfg.block_scaled.format)
        for name, w in (("w13", w13_weight), ("w2", w2_weight)):
            if str(w.format) != fmt:
                raise ValueError(f"{name} was prepared for {w.format!s}, the context runs {fmt}")
        w13, w2 = w13_weight.source, w2_weight.source
        grad_weights = [] if cfg.inference else [w13, w2]
    else:
        w13, w2 = w13_weight, w2_weight
        grad_weights = [w13, w2]
    _check_tensors(x, ids, scores, w13, w2, context)

    rms_weight = post.weight if isinstance(post, RMSNormPostprocess) else None
    grad_inputs = [t for t in (x, scores, *grad_weights, rms_weight) if t is not None]
    if cfg.inference and any(t.requires_grad for t in grad_inputs):
        raise RuntimeError("inference contexts do not support autograd")
    save = torch.is_grad_enabled() and any(t.requires_grad for t in grad_inputs)
    operands = ()  # block-scaled: the prepared operands the ops read (W13's five, then W2's)
    if block_scaled:
        operands = (*_prepared_operands(w13_weight), *_prepared_operands(w2_weight)) if all(prepared) else \
            _dynamic_operands(w13, w2, context)
    remat = None if raw_weights is None or not save else \
        _Rematerialize(options, *raw_weights, w13, w2, context)

    if post is not None and not isinstance(post, RMSNormPostprocess):  # a callable (eager, checked above)
        return _routed_with_callable(x, ids, scores, w13, w2, context, options, save, operands, remat)

    if isinstance(post, RMSNormPostprocess):
        validate_rmsnorm_postprocess(post, input_dtype=x.dtype, score_dtype=scores.dtype, topk=K, dim=D, training=save)
    rms = _rmsnorm_args(post)

    if isinstance(post, RMSNormPostprocess) and (post.observe_expert_output_fn or post.observe_expert_output_grad_fn):
        if save and (options.inplace_wgrad_accum or options.wgrad_destination_fn is not None):
            raise ValueError("RMSNormPostprocess observers support functional WGRAD (optionally wgrad_postprocess_fn) only")
        return _ObservedRmsnormFunction.apply(x, ids, scores, w13, w2, context, options, remat, rms, save,
                                              *operands)

    if block_scaled:
        if not save:  # forward only: inference, or a training context's scratch-only call
            out, _state = torch.ops.dist_moe.block_scaled_forward(
                x, ids, scores, *operands, *rms, False, *context.selected_activation_slot, options.validate_expert_ids,
                context.context_id,
            )
            return out
        return _BlockScaledFunction.apply(x, ids, scores, w13, w2, context, options, remat, rms, *operands)

    if not save:
        slot, depth = context.selected_activation_slot
        return torch.ops.dist_moe.bf16(
            x, ids, scores, w13, w2, *rms,
            context.activation_storage, slot, depth, context.routing_storage, context.dispatch_storage,
            context.combine_storage, stats, float(options.swiglu_clip_limit), options.validate_expert_ids,
            context.context_id,
        )  # fmt: skip
    if options.inplace_wgrad_accum and options.wgrad_postprocess_fn is not None:  # guarded by the options too
        raise ValueError("inplace_wgrad_accum cannot be combined with wgrad_postprocess_fn")
    out, new_stats = _Bf16Function.apply(x, ids, scores, w13, w2, context, options, remat, rms, stats is not None)
    if stats is not None:
        stats.copy_(new_stats)  # graph-visible write into the caller's tensor
    return out

