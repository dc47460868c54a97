"""Upstream's routing-shape trap scenarios at world size 1, one per process (a device trap ends the CUDA
context): ``python trap_worker.py SCENARIO``. Prints EXPECTED_DIST_MOE_TRAP before the call that must
trap and UNEXPECTED if it returns; test_traps.py checks the diagnostic.

  overflow_bf16             BF16 training context (T=8, D=F=128, K=1), device scratch factor 0.5, all
                            tokens to expert 0 under no_grad: more received rows than the scratch holds
  overflow_mxfp8_inference  MXFP8 inference with prepared weights (D=F=256, K=1), factor 0.5, every
                            token to expert 0: upstream's rank 0 receives 4 x 512 rows from four
                            ranks; one rank of T=2048 receives the same 2048 rows, past the plan's
                            1408 (at T=512 one rank's 512 rows, even padded to 32 per expert, fit
                            its 640: s58 r1, r3)
  bad_id_bf16               T=128, D=F=256, K=1, E=4, every id -2, validate_expert_ids, BF16 no_grad
  bad_id_mxfp8_inference    the same with every id 4 on an MXFP8 inference context, prepared weights
"""

import ctypes
import faulthandler
import os
import sys
import tempfile

import torch
import torch.distributed as dist

import dist_moe

MXFP8 = dist_moe.BlockScaledConfig(format=dist_moe.BlockScaledFormat.MXFP8_E4M3)


def run(scenario):
    overflow = scenario.startswith("overflow")
    mxfp8 = scenario.endswith("mxfp8_inference")
    T, D = (2048 if mxfp8 else 8, 256 if mxfp8 else 128) if overflow else (128, 256)
    E, K = 4, 1
    kw = dict(device_scratch_capacity_factor=0.5) if overflow else {}
    if mxfp8:
        kw.update(block_scaled=MXFP8, inference=True, num_activation_slots=0)
    cfg = dist_moe.Config(max_num_local_input_tokens=T, hidden_dim=D, intermediate_dim=D, top_k=K, num_experts=E,
                          max_moe_layers_per_activation_slot=1, **kw)
    ctx = dist_moe.create_context(group=dist.group.WORLD, config=cfg, device=0)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(T, D, generator=g).to(torch.bfloat16).cuda()
    ids = torch.full((T, K), 0 if overflow else (4 if mxfp8 else -2), dtype=torch.int32, device="cuda")
    scores = torch.ones(T, K, device="cuda")
    w13 = (torch.randn(E, 2 * D, D, generator=g) * D**-0.5).to(torch.bfloat16).cuda()
    w2 = (torch.randn(E, D, D, generator=g) * D**-0.5).to(torch.bfloat16).cuda()
    if mxfp8:
        w13, w2 = (dist_moe.prepare_block_scaled_weight(w, MXFP8) for w in (w13, w2))
    opts = dist_moe.ExecutionOptions(validate_expert_ids=not overflow)
    print("EXPECTED_DIST_MOE_TRAP", flush=True)
    with torch.no_grad():
        out = dist_moe.routed_experts(x, ids, scores, w13, w2, ctx, options=opts)
    torch.cuda.synchronize()  # the trap surfaces here
    print(f"UNEXPECTED: no trap ({out.float().abs().sum().item()})", flush=True)


def leave(code):
    """Exit without the interpreter's teardown: after a device trap the CUDA context is gone, and the
    NCCL communicator's and the context's destructors may block on it. The device printf lines (the
    diagnostic) sit in C stdio's buffer, which os._exit would drop: flush it first."""
    sys.stdout.flush()
    sys.stderr.flush()
    ctypes.CDLL(None).fflush(None)
    os._exit(code)


def main():
    faulthandler.dump_traceback_later(60, exit=True)  # a hang prints where it is and ends the process
    torch.cuda.set_device(0)
    store = tempfile.NamedTemporaryFile(prefix="dmoe_pg_", delete=False).name
    os.unlink(store)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    try:
        run(sys.argv[1])
    except Exception as e:  # the expected end: the trap surfaces as a CUDA error
        print(f"{type(e).__name__}: {e}", flush=True)
        leave(1)
    leave(0)


if __name__ == "__main__":
    main()
