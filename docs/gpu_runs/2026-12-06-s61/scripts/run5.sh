#!/usr/bin/env bash
# s61 r5: the FP8-blockwise picks re-swept on HEAD (last swept in s34, G77; G119's descriptors and
# G66-G72's kernels changed since): every compiled configuration of each FP8 layer GEMM in three
# interleaved rounds -- qwen3_30b at the layer's EP1 sizes (the training layer of issue #27's 1.3x),
# then qwen3_30b and mixtral EP2 (the GEMM table), balanced rows. On an H200 first: run4.sh's owed A / B.
RUN_NAME=s61r5; source scripts/device_run_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
[[ $gpu == *H200* ]] && exec bash docs/gpu_runs/2026-12-06-s61/scripts/run4.sh  # (its own logs)
OUT=$L scripts/quick_build.sh bench_grouped_gemm || exit 1
echo "built at $((SECONDS-T0)) s"
OPS=w13_fprop_fp8,w2_fprop_fp8,w13_dgrad_fp8,w2_dgrad_fp8,w13_wgrad_fp8,w2_wgrad_fp8
for ep in 1 2; do
  shapes=qwen3_30b; [ $ep = 2 ] && shapes=qwen3_30b,mixtral
  [ "$(left)" -lt 120 ] && break
  timeout $(( $(left) - 30 )) build-gpu/bench/bench_grouped_gemm --ep $ep --shapes $shapes --routing balanced --ops $OPS \
    --sweep --rounds 3 --iters 10 --sustain-ms 100 > $L/sweep_ep$ep.log 2>&1
  echo "sweep ep$ep rc=$? at $((SECONDS-T0)) s"
  grep -E "^fp8 .*\(pick\)|^  sweep .*fp8" $L/sweep_ep$ep.log | awk '{$1=$1; print}' | cut -c1-120
done
