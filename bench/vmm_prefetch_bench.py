"""Context creation with a VMM host section, prefetch on and off (``VmmConfig.prefetch``), alternated
in one process on one GPU: the prefetch maps (and pins) the host section on a background thread
while the context sets up its communication buffers, so creation should take about the longer of
the two instead of their sum.

    python bench/vmm_prefetch_bench.py [--shape dsv3_prefill] [--tokens T] [--device-factor 0.125] [--rounds 5]

Each round creates and closes one context per setting (BF16 inference: scratch only, world size 1,
the total scratch factor clamped to 1.0, ``--device-factor`` of it on the device, the rest in
pinned host memory). Prints each round's wall times, then medians and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist

import dist_moe

SHAPES = {  # tokens per rank, hidden, intermediate, top-k, experts (src/core/workloads.cpp)
    "dsv3_prefill": (4096, 7168, 2048, 8, 256),
    "qwen3_30b": (8192, 2048, 768, 8, 128),
    "mixtral": (4096, 4096, 14336, 2, 8),
}


def config(shape, device_factor, prefetch, tokens=None):
    t, d, f, k, e = SHAPES[shape]
    t = tokens or t
    return dist_moe.Config(max_num_local_input_tokens=t, hidden_dim=d, intermediate_dim=f, top_k=k, num_experts=e,
                           max_moe_layers_per_activation_slot=1, inference=True, num_activation_slots=0,
                           activation_slot_capacity_factor=None, device_scratch_capacity_factor=device_factor,
                           vmm=dist_moe.VmmConfig(total_scratch_capacity_factor=1.0, prefetch=prefetch))


def create_and_close(cfg, device):
    """Wall seconds of create_context (synchronized), then closes the context."""
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    ctx = dist_moe.create_context(group=dist.group.WORLD, config=cfg, device=device)
    torch.cuda.synchronize(device)
    seconds = time.perf_counter() - t0
    assert ctx.activation_buffer.host_scratch_size > 0
    ctx.close()
    return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="dsv3_prefill", choices=sorted(SHAPES))
    ap.add_argument("--device-factor", type=float, default=0.125)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=None,
                    help="tokens per rank instead of the shape's (a larger host section)")
    a = ap.parse_args()
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    store = tempfile.NamedTemporaryFile(prefix="dmoe_pg_", delete=False).name
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1, device_id=device)
    try:
        cfg = config(a.shape, a.device_factor, True, a.tokens)
        label = f"{a.shape} T={cfg.max_num_local_input_tokens}"
        plan = dist_moe.plan_memory(cfg, 1)
        print(f"{label}: device scratch {plan.device_scratch_bytes / 2**30:.2f} GiB, "
              f"host section {plan.host_scratch_bytes / 2**30:.2f} GiB", flush=True)
        create_and_close(config(a.shape, a.device_factor, False, a.tokens), device)  # warm: first CUDA / NCCL use
        times = {True: [], False: []}
        for r in range(a.rounds):
            for prefetch in (True, False) if r % 2 == 0 else (False, True):
                times[prefetch].append(create_and_close(config(a.shape, a.device_factor, prefetch, a.tokens), device))
            print(f"round {r + 1}: prefetch on {times[True][-1] * 1e3:.1f} ms, off {times[False][-1] * 1e3:.1f} ms",
                  flush=True)
        on, off = statistics.median(times[True]), statistics.median(times[False])
        print("| shape | host GiB | prefetch on ms | off ms | off / on |")
        print("| --- | ---: | ---: | ---: | ---: |")
        host_gib = plan.host_scratch_bytes / 2**30
        print(f"| {label} | {host_gib:.2f} | {on * 1e3:.1f} | {off * 1e3:.1f} | {off / on:.2f} |")
    finally:
        dist.destroy_process_group()
        if os.path.exists(store):  # the file store may have removed it
            os.unlink(store)


if __name__ == "__main__":
    main()
