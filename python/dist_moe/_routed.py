"""``routed_experts``: validation, path selection and autograd over the registered ops (torch).

Paths (upstream §1.10):
  - no gradient needed (inference context, no-grad, or no input requires grad): ``dist_moe::bf16``;
  - training: ``_Bf16Function`` over ``dist_moe::bf16_forward`` / ``bf16_backward`` or, with
    ``inplace_wgrad_accum`` and existing ``.grad`` buffers, ``bf16_backward_accumulate_``.
"""

from __future__ import annotations

import torch

from . import _ops  # noqa: F401  (registers the torch.ops.dist_moe ops used below)
from ._context import Context
from ._execution import PreparedWeight
from ._postprocess import RMSNormPostprocess, validate_rmsnorm_postprocess

_NO_RMSNORM = (None, False, 0.0, torch.float32, torch.float32, True, 0.0, False, False)
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


class _Bf16Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, ids, scores, w13, w2, context, options, rms, collect_stats):
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
        ctx.save_for_backward(x, ids, scores, w13, w2, state)
        ctx.context, ctx.options, ctx.rms = context, options, rms
        ctx.mark_non_differentiable(stats)
        return out, stats

    @staticmethod
    def backward(ctx, grad_out, _grad_stats):
        x, ids, scores, w13, w2, state = ctx.saved_tensors
        context, options, rms = ctx.context, ctx.options, ctx.rms
        grad_out = grad_out.to(torch.bfloat16).contiguous()
        cid = context.context_id
        config_dtype = context.config.wgrad_dtype
        if options.wgrad_destination_fn is not None:
            return _backward_to_destinations(grad_out, x, ids, scores, w13, w2, state, context, options, rms)
        if options.inplace_wgrad_accum:
            owners = options.wgrad_parameter_owners or (None, None)
            p13, p2 = _owner(w13, owners[0]), _owner(w2, owners[1])
            d13, d2 = resolve_wgrad_dtype(p13, config_dtype), resolve_wgrad_dtype(p2, config_dtype)
            if d13 != d2:
                raise RuntimeError(f"W13 and W2 resolve to different WGRAD dtypes ({d13} vs {d2})")
            if p13.grad is not None and p2.grad is not None:
                gx, gs = torch.ops.dist_moe.bf16_backward_accumulate_(
                    grad_out, x, ids, _accumulator(p13, w13), _accumulator(p2, w2), scores, w13, w2, state,
                    *rms, d13, cid,
                )  # fmt: skip
                return gx, None, gs, None, None, None, None, None, None
            wgrad_dtype = d13
        else:
            wgrad_dtype = _config_wgrad_dtype(context, w13)
        gx, gs, g13, g2 = torch.ops.dist_moe.bf16_backward(
            grad_out, x, ids, scores, w13, w2, state, *rms, wgrad_dtype, cid
        )
        g13, g2 = _postprocessed_wgrads(options, g13, g2)
        return gx, None, gs, g13, g2, None, None, None, None


def _backward_to_destinations(grad_out, x, ids, scores, w13, w2, state, context, options, rms):
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
    cid = context.context_id
    if acc13 and acc2:
        gx, gs = torch.ops.dist_moe.bf16_backward_accumulate_(grad_out, x, ids, d13, d2, scores, w13, w2, state, *rms, dtype, cid)
    else:
        gx, gs, g13, g2 = torch.ops.dist_moe.bf16_backward(grad_out, x, ids, scores, w13, w2, state, *rms, dtype, cid)
        for dest, acc, g in ((d13, acc13, g13), (d2, acc2, g2)):
            dest.add_(g) if acc else dest.copy_(g)
    return gx, None, gs, None, None, None, None, None, None


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


def _native_forward_with_routes(x, ids, scores, w13, w2, context, options, rms, save):
    """One eager forward (or inference) of the native context that also exports this rank's route
    rows h3 [T, K, D] BF16. Returns (out [T, D], h3, state); state is the saved-state buffer when
    ``save`` outside inference, else None."""
    native = context._native_context()
    T, K, D = x.shape[0], ids.shape[1], x.shape[1]
    out = torch.empty((T, D), dtype=torch.bfloat16, device=x.device)
    h3 = torch.empty((T, K, D), dtype=torch.bfloat16, device=x.device)
    stats = options.swiglu_clip_stats_out_3
    opts = _ops._options(rms, 0 if stats is None else stats.data_ptr(), float(options.swiglu_clip_limit),
                         options.validate_expert_ids)
    opts["expert_output"] = h3.data_ptr()
    inputs = _ops._inputs(x, ids, scores, w13, w2)
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
    saved x, ids, scores, w13, w2, state and context, options). grad_out: the BF16 [T, D] output
    gradient, or None when the route gradient comes in through ``route_opts``; route_opts: the
    route-level entries of the options. Returns (gx, gs or None, g13, g2), WGRAD not postprocessed."""
    x, ids, scores, w13, w2, state = ctx.saved_tensors
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
    context._native_context().backward(_ops._inputs(x, ids, scores, w13, w2), state.data_ptr(),
                                       0 if grad_out is None else grad_out.data_ptr(), grads, opts,
                                       _ops._stream(x.device))
    return gx, gs, g13, g2


class _ExpertRoutesFunction(torch.autograd.Function):
    """(x, w13, w2) -> this rank's route rows h3 [T, K, D] BF16: the experts without the top-k
    reduction, for a postprocess the caller runs. Backward takes grad_h3 straight into the library's
    backward (route-level I/O of the C++ pipeline); score gradients come from the caller's reduction."""

    @staticmethod
    def forward(ctx, x, ids, scores, w13, w2, context, options, save):
        # out: the library's reduction, unused
        _out, h3, state = _native_forward_with_routes(x, ids, scores, w13, w2, context, options, _NO_RMSNORM, save)
        if save and not context.config.inference:
            ctx.save_for_backward(x, ids, scores, w13, w2, state)
            ctx.context, ctx.options = context, options
        return h3

    @staticmethod
    def backward(ctx, grad_h3):
        grad_h3 = grad_h3.to(torch.bfloat16).contiguous()
        gx, _gs, g13, g2 = _native_backward_with_routes(ctx, _NO_RMSNORM, None,
                                                        {"grad_expert_output": grad_h3.data_ptr()}, False)
        g13, g2 = _postprocessed_wgrads(ctx.options, g13, g2)
        return gx, None, None, g13, g2, None, None, None


class _ObservedRmsnormFunction(torch.autograd.Function):
    """The fused layer with the RMSNorm postprocess, eager, handing this rank's route rows h3
    [T, K, D] to ``observe_expert_output_fn`` and their gradient to ``observe_expert_output_grad_fn``
    (route-level export of the C++ pipeline; the reduction stays fused)."""

    @staticmethod
    def forward(ctx, x, ids, scores, w13, w2, context, options, rms, save):
        post = options.experts_output_postprocess
        out, h3, state = _native_forward_with_routes(x, ids, scores, w13, w2, context, options, rms, save)
        if post.observe_expert_output_fn is not None:
            post.observe_expert_output_fn(_padded_rows_zeroed(h3, ids, options))
        if save:
            ctx.save_for_backward(x, ids, scores, w13, w2, state)
            ctx.context, ctx.options, ctx.rms = context, options, rms
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, ids = ctx.saved_tensors[0], ctx.saved_tensors[1]
        post = ctx.options.experts_output_postprocess
        grad_out = grad_out.to(torch.bfloat16).contiguous()
        gh3 = torch.empty((x.shape[0], ids.shape[1], x.shape[1]), dtype=torch.bfloat16, device=x.device)
        gx, gs, g13, g2 = _native_backward_with_routes(ctx, ctx.rms, grad_out,
                                                       {"grad_expert_output_out": gh3.data_ptr()}, True)
        if post.observe_expert_output_grad_fn is not None:
            post.observe_expert_output_grad_fn(gh3)
        g13, g2 = _postprocessed_wgrads(ctx.options, g13, g2)
        return gx, None, gs, g13, g2, None, None, None, None


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


def _routed_with_callable(x, ids, scores, w13, w2, context, options, save):
    """out[t] = sum_k s[t,k] * f(h3[t,k]) in FP32 over valid routes, f the caller's postprocess."""
    if save and (options.inplace_wgrad_accum or options.wgrad_destination_fn is not None):
        raise ValueError(
            "a callable experts_output_postprocess supports functional WGRAD (optionally wgrad_postprocess_fn) only"
        )
    h3 = _ExpertRoutesFunction.apply(x, ids, scores, w13, w2, context, options, save)
    valid = (ids >= 0).unsqueeze(-1)
    h3 = _padded_rows_zeroed(h3, ids, options)
    y = options.experts_output_postprocess(h3)
    _check_callback_output(y, h3)
    y = torch.where(valid, y.float(), torch.zeros((), dtype=torch.float32, device=y.device))
    return (y * scores.float().unsqueeze(-1)).sum(dim=1).to(x.dtype)


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

    post = options.experts_output_postprocess
    if options.requires_eager:
        if _tracing():
            raise RuntimeError("DistMoE Python weight, expert-output, and WGRAD callbacks require eager execution")
    if options.weights_preprocess_fn is not None:
        w13_weight = options.weights_preprocess_fn(w13_weight)
        w2_weight = options.weights_preprocess_fn(w2_weight)
    w13, w2 = w13_weight, w2_weight
    _check_tensors(x, ids, scores, w13, w2, context)

    if post is not None and not isinstance(post, RMSNormPostprocess):  # a callable (eager, checked above)
        grad_inputs = [x, scores, w13, w2]
        if cfg.inference and any(t.requires_grad for t in grad_inputs):
            raise RuntimeError("inference contexts do not support autograd")
        save = torch.is_grad_enabled() and any(t.requires_grad for t in grad_inputs)
        return _routed_with_callable(x, ids, scores, w13, w2, context, options, save)

    rms_weight = post.weight if isinstance(post, RMSNormPostprocess) else None
    grad_inputs = [t for t in (x, scores, w13, w2, rms_weight) if t is not None]
    if cfg.inference and any(t.requires_grad for t in grad_inputs):
        raise RuntimeError("inference contexts do not support autograd")
    save = torch.is_grad_enabled() and any(t.requires_grad for t in grad_inputs)
    if isinstance(post, RMSNormPostprocess):
        validate_rmsnorm_postprocess(post, input_dtype=x.dtype, score_dtype=scores.dtype, topk=K, dim=D, training=save)
    rms = _rmsnorm_args(post)

    if isinstance(post, RMSNormPostprocess) and (post.observe_expert_output_fn or post.observe_expert_output_grad_fn):
        if save and (options.inplace_wgrad_accum or options.wgrad_destination_fn is not None):
            raise ValueError("RMSNormPostprocess observers support functional WGRAD (optionally wgrad_postprocess_fn) only")
        return _ObservedRmsnormFunction.apply(x, ids, scores, w13, w2, context, options, rms, save)

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
    out, new_stats = _Bf16Function.apply(x, ids, scores, w13, w2, context, options, rms, stats is not None)
    if stats is not None:
        stats.copy_(new_stats)  # graph-visible write into the caller's tensor
    return out

