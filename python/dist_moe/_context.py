"""Contexts: the collective owner of windows, activation buffer and planner state on one rank.

A ``Context`` wraps one ``dist_moe._C.Context`` (C++). It is registered under a string id that the
registered ops carry (``context_id``), because ops cannot take Python objects. Importing this module
does not import torch; creating a context does.
"""

from __future__ import annotations

import itertools
import logging
from typing import NamedTuple

_log = logging.getLogger("dist_moe")
_REGISTRY: dict[str, "Context"] = {}
_NEXT_ID = itertools.count()


def get_context(context_id: str) -> "Context":
    ctx = _REGISTRY.get(context_id)
    if ctx is None or ctx._closed:
        raise RuntimeError(f"distributed MoE context {context_id} is not live")
    return ctx


class _DeviceMemory:
    """A non-owning ``__cuda_array_interface__`` view of context-owned bytes (for torch.as_tensor)."""

    def __init__(self, ptr: int, nbytes: int, owner):
        self._owner = owner  # keeps the C++ context alive while a tensor views its memory
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (ptr, False),
            "version": 3,
            "strides": None,
        }


class ScratchInfo(NamedTuple):
    """What ``ActivationBuffer.check_overflow()`` reports (bytes; host fields None without host scratch)."""

    scratch_min_free: int
    scratch_size: int
    scratch_max_used: int
    device_scratch_size: int
    device_scratch_used: int
    host_scratch_size: int | None
    host_scratch_used: int | None


class ActivationBuffer:
    """``Context.activation_buffer``: the context's activation buffer and its device planner state,
    under upstream's names (``docs/python_api.md``, "Activation buffer").

    Live views of context-owned device memory (no host read; they change as calls run):
    ``buffer`` (uint8, the whole buffer), ``saved_activation_bytes_per_rank`` (int64 [N*R], slot
    major), ``moe_layer_id`` (int64 [N]: layers saved in each slot and not yet popped),
    ``peak_min_free_space`` (int64 [N+1]: the lowest free bytes seen per slot, then scratch),
    ``activation_slot_ids_S`` (int64 [max(N, 1)]) and ``activation_slot_id_1`` (the selected
    slot's one-element view). ``buffer_offsets`` (int64 [N+1]: every slot's free start on this
    rank, then the scratch end) is computed from the live state on access, on the device, as a new
    tensor. Constants: ``initial_buffer_offsets``, ``num_activation_slots``,
    ``activation_slot_bytes``, ``device_scratch_size``, ``host_scratch_size``.
    ``check_overflow()`` synchronizes the device.
    """

    def __init__(self, context: "Context"):
        import torch

        self._context = context
        native = context._native
        st = native.planner_storage()
        dev = context.device

        def view(name):
            ptr, nbytes = st[name]
            return torch.as_tensor(_DeviceMemory(ptr, nbytes, native), device=dev).view(torch.int64)

        self.buffer = context._storages["activation"]
        self.saved_activation_bytes_per_rank = view("saved_bytes")
        self.moe_layer_id = view("layer_ids")
        self.peak_min_free_space = view("peak_min_free")
        self.activation_slot_ids_S = view("slot_ids")
        self.num_activation_slots = int(st["num_slots"])
        self.activation_slot_bytes = int(st["slot_bytes"])
        self._buffer_bytes = int(st["buffer_bytes"])
        self._rank, self._world = int(st["rank"]), int(st["world"])
        plan = context.memory_plan
        self.device_scratch_size = int(plan.device_scratch_bytes)
        self.host_scratch_size = int(plan.host_scratch_bytes) if context.config.vmm is not None else 0
        N = self.num_activation_slots
        starts = [s * self.activation_slot_bytes for s in range(N)]
        self.initial_buffer_offsets = torch.tensor(starts + [self._buffer_bytes], dtype=torch.int64, device=dev)

    @property
    def activation_slot_id_1(self):
        return self.activation_slot_ids_S[self._context._selected_slot:self._context._selected_slot + 1]

    @property
    def buffer_offsets(self):
        import torch

        N, R = self.num_activation_slots, self._world
        starts = self.initial_buffer_offsets[:N] + self.saved_activation_bytes_per_rank.view(N, R)[:, self._rank]
        return torch.cat([starts, self.initial_buffer_offsets[N:]])

    def check_overflow(self) -> ScratchInfo:
        """Blocking: the scratch and slot peaks so far; ValueError if any region overflowed."""
        import torch

        torch.cuda.synchronize(self._context.device)
        peaks = self.peak_min_free_space.tolist()
        N = self.num_activation_slots
        scratch_size = self._buffer_bytes - N * self.activation_slot_bytes
        min_free = peaks[N]
        used = scratch_size - min_free
        host = self.host_scratch_size or None
        info = ScratchInfo(min_free, scratch_size, used, self.device_scratch_size, min(used, self.device_scratch_size),
                           host, None if host is None else max(0, used - self.device_scratch_size))
        cfg = self._context.config
        if min_free < 0:
            raise ValueError(
                f"Activation buffer overflowed, numerics are corrupted: scratch needed {-min_free} more bytes; try "
                f"device_scratch_capacity_factor={cfg.device_scratch_capacity_factor * 1.25:g}"
            )
        for s in range(N):
            if peaks[s] < 0:
                raise ValueError(
                    f"Activation buffer overflowed, numerics are corrupted: activation slot {s} needed {-peaks[s]} "
                    f"more bytes; try activation_slot_bytes={self.activation_slot_bytes + int(1.25 * -peaks[s])}"
                )
        return info


class Context:
    """A collective Dist-MoE context (factory-only: use ``create_context``).

    Attributes: ``group``, ``config``, ``memory_plan``, ``device``; the context-owned storages
    ``activation_storage``, ``routing_storage``, ``dispatch_storage``, ``combine_storage`` (uint8
    views of device memory the context owns; the ops check they get exactly these views).
    """

    def __init__(self, *args, **kwargs):
        raise TypeError("use create_context() to create a Context")

    @classmethod
    def _create(cls, *, group, config, memory_plan, device, native) -> "Context":
        import torch

        self = object.__new__(cls)
        self.group = group
        self.config = config
        self.memory_plan = memory_plan
        self.device = device
        self._native = native
        self._closed = False
        self._context_id = f"dist_moe_ctx_{next(_NEXT_ID)}"
        self._storages = {
            name: torch.as_tensor(_DeviceMemory(ptr, nbytes, native), device=device)
            for name, (ptr, nbytes) in native.storages().items()
        }
        self._selected_slot = 0
        self._num_moe_layers_in_selected_slot = config.max_moe_layers_per_activation_slot
        self._saved_state_bytes = native.saved_state_bytes  # fixed per context; read by every forward
        self._activation_buffer = ActivationBuffer(self)
        _REGISTRY[self._context_id] = self
        return self

    # ---- properties (upstream's) ----------------------------------------------------------------
    @property
    def max_num_local_input_tokens(self) -> int:
        return self.config.max_num_local_input_tokens

    @property
    def hidden_dim(self) -> int:
        return self.config.hidden_dim

    @property
    def top_k(self) -> int:
        return self.config.top_k

    @property
    def context_id(self) -> str:
        self._check_open()
        return self._context_id

    @property
    def rank(self) -> int:
        return self._native_context().rank

    @property
    def ep_size(self) -> int:
        return self._native_context().ep_size

    @property
    def activation_storage(self):
        return self._storages["activation"]

    @property
    def routing_storage(self):
        return self._storages["routing"]

    @property
    def dispatch_storage(self):
        return self._storages["dispatch"]

    @property
    def combine_storage(self):
        return self._storages["combine"]

    @property
    def activation_buffer(self) -> ActivationBuffer:
        """The activation buffer and its planner state (upstream's ``ActivationBuffer`` fields)."""
        self._check_open()
        return self._activation_buffer

    @property
    def selected_activation_slot(self) -> tuple[int, int]:
        """(slot, number of MoE layers in it) that the next training forward pushes to."""
        return self._selected_slot, self._num_moe_layers_in_selected_slot

    # ---- state ----------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("distributed MoE context is closed")

    def _native_context(self):
        self._check_open()
        return self._native

    def reset(self) -> None:
        """Puts the activation planner back to its initial state (device work; graph-safe).

        Use only after an aborted schedule, never while a backward still owns saved state.
        """
        import torch

        native = self._native_context()
        native.reset(torch.cuda.current_stream(self.device).cuda_stream)
        self._selected_slot = 0
        self._num_moe_layers_in_selected_slot = self.config.max_moe_layers_per_activation_slot

    def select_activation_slot(self, activation_slot: int, num_moe_layers_in_slot: int) -> None:
        """Selects the slot the next training forwards push to and how many layers it will hold."""
        native = self._native_context()
        if self.config.inference:
            return  # inference contexts have no slots
        native.select_activation_slot(int(activation_slot), int(num_moe_layers_in_slot))  # validates
        self._selected_slot = int(activation_slot)
        self._num_moe_layers_in_selected_slot = int(num_moe_layers_in_slot)

    def planner_snapshot(self) -> dict:
        """Synchronizing copy of the planner state: saved bytes per slot and rank, layer ids (tests)."""
        return self._native_context().planner_snapshot()

    def close(self) -> None:
        """Collective and idempotent: synchronizes the device and releases every buffer."""
        if self._closed:
            return
        _REGISTRY.pop(self._context_id, None)
        self._storages = {}
        self._activation_buffer = None
        self._native.close()
        self._closed = True

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"rank {self._native.rank}/{self._native.ep_size}"
        return f"dist_moe.Context({self._context_id}, {state}, device={self.device})"


def create_context(*, group, config, plan_memory, resolved_plan, device=None, emulate_peer_buffers=None) -> Context:
    """Collectively creates a context over the torch process group ``group`` (see api.create_context;
    ``plan_memory`` and ``resolved_plan`` (plan dict -> MemoryPlan) are api's, passed in so that this
    module never imports api: the package's modules import one way, api -> _routed -> _ops -> _context).
    The context's ``memory_plan`` is the native context's own, with its VMM sections resolved."""
    import torch
    import torch.distributed as dist

    from . import _native_loader  # (the torch ops were registered by `import dist_moe`)

    if not torch.cuda.is_available():
        raise RuntimeError("Dist-MoE requires CUDA")
    if group is None:
        group = dist.group.WORLD
    world_size = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if config.num_experts % world_size != 0:
        raise ValueError(f"num_experts={config.num_experts} must be divisible by world_size={world_size}")
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device())
    elif isinstance(device, int):
        device = torch.device("cuda", device)
    else:
        device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"device must be CUDA, got {device}")
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    backend = str(dist.get_backend(group))
    if emulate_peer_buffers is None:
        emulate_peer_buffers = backend == "fake"
    plan = plan_memory(config, world_size, device=device)
    _log.info("%s", plan.explain())

    gpu = _native_loader.gpu()
    if emulate_peer_buffers:
        # Every virtual peer aliases this rank's windows; only this rank runs (not collective: no
        # unique id travels). Validates shapes and memory; routes other ranks own come back as zeros.
        unique_id = b""
    else:
        # The NCCL unique id travels over the caller's process group; the group's own backend does
        # the broadcast (a CUDA tensor for NCCL groups, CPU for gloo).
        on_cuda = "nccl" in backend
        uid = torch.zeros(128, dtype=torch.uint8, device=device if on_cuda else "cpu")
        if rank == 0:
            uid.copy_(torch.frombuffer(bytearray(gpu.unique_id()), dtype=torch.uint8))
        dist.broadcast(uid, src=dist.get_process_group_ranks(group)[0], group=group)
        unique_id = bytes(uid.cpu().tolist())
    with torch.cuda.device(device):
        native = gpu.Context(config._as_dict(), unique_id, rank, world_size, device.index,
                             emulate_peer_buffers=bool(emulate_peer_buffers))
    if config.vmm is not None:  # the sections and padding of the range the context mapped
        plan = resolved_plan(native.memory_plan())
    return Context._create(group=group, config=config, memory_plan=plan, device=device, native=native)
