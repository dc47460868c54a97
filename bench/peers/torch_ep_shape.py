"""Runs the stock-PyTorch EP baseline (torch_ep_baseline.py) for one reference shape and prints one
JSON line `BASELINE {...}` with its per-rank forward and forward+backward times (rank 0).

  python3 bench/peers/torch_ep_shape.py --shape dsv3_prefill [--gpus N]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import torch_ep_baseline as base  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", required=True, choices=sorted(base.SHAPES))
    ap.add_argument("--gpus", type=int, default=torch.cuda.device_count())
    args = ap.parse_args()
    base.SHAPES = {args.shape: base.SHAPES[args.shape]}  # the workers loop over this dict
    R = args.gpus
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=base.worker, args=(r, R, 29531, q)) for r in range(R)]
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
