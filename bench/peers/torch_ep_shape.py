"""Runs the stock-PyTorch EP baseline (torch_ep_baseline.py) for one reference shape and prints one
JSON line `BASELINE {...}` with its per-rank forward and forward+backward times (rank 0).

  python3 bench/peers/torch_ep_shape.py --shape dsv3_prefill [--gpus N] [--sustain-ms MS]

--sustain-ms: every timed measurement of the baseline follows MS ms of a local dense BF16 matmul load
(no collective, so ranks need not agree on a count), like `dist-moe bench` does for ours: both are
timed at the GPU's power-limited clocks (docs/perf.md G22).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import torch_ep_baseline as base  # noqa: E402


def with_preheat(bench, sustain_ms):
    """base.bench, preceded by sustain_ms of 8192^3 BF16 matmuls on this rank's GPU."""
    load = {}

    def run(fn, iters=20, warm=5):
        if sustain_ms > 0:
            if not load:
                load["a"] = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
                load["b"] = torch.randn_like(load["a"])
            t0 = time.perf_counter()
            while (time.perf_counter() - t0) * 1e3 < sustain_ms:
                for _ in range(4):
                    load["a"] @ load["b"]
                torch.cuda.synchronize()
        return bench(fn, iters, warm)

    return run


def worker(shape, sustain_ms, *args):
    # Spawned processes import torch_ep_baseline afresh: restrict its shapes here, in the worker (a
    # change made in the parent does not reach them), and wrap its bench (looked up at call time).
    base.SHAPES = {shape: base.SHAPES[shape]}
    base.bench = with_preheat(base.bench, sustain_ms)
    base.worker(*args)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", required=True, choices=sorted(base.SHAPES))
    ap.add_argument("--gpus", type=int, default=torch.cuda.device_count())
    ap.add_argument("--sustain-ms", type=float, default=0.0)
    args = ap.parse_args()
    R = args.gpus
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(args.shape, args.sustain_ms, r, R, 29531, q)) for r in range(R)]
    for p in procs:
        p.start()
    results = dict(q.get() for _ in range(R))
    for p in procs:
        p.join()
    r0 = results[0]
    m = r0[args.shape]
    print("BASELINE " + json.dumps({"shape": args.shape, "gpus": R, "fwd_ms": m["ep_fwd_ms"],
                                    "fwd_bwd_ms": m["ep_fwd_bwd_ms"], "grouped_w13_tflops": m["grouped_w13_tflops"],
                                    "dense_bf16_tflops": r0["dense_bf16_tflops"]}), flush=True)


if __name__ == "__main__":
    main()
