#!/usr/bin/env bash
# s71 r2: G148's measurement -- the FP8-blockwise DGRAD and WGRAD of one weight at once on two streams (the
# DGRAD on d SMs, the WGRAD on the rest) against the two in sequence on every SM, in the layer's WGRAD form
# (BF16 gradients accumulated). qwen3_30b EP1 (the 1.3x gap) and dsv3_prefill at EP2 sizes.
RUN_NAME=s71r2; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh bench_grouped_gemm || exit 1
B=build-gpu/bench/bench_grouped_gemm
common="--routing random --iters 5 --rounds 3 --sustain-ms 100 --fp8-wgrad-bf16 --wgrad-accumulate"
timeout 150 $B --shapes qwen3_30b --ep 1 --ops w13_bwd_pair_fp8,w2_bwd_pair_fp8 --backward-pair 52,66,80,92,104 \
  $common > $L/pair_qwen3_ep1.log 2>&1
echo "qwen3_30b ep1 rc=$?"; grep -E "^pair|Error|error" $L/pair_qwen3_ep1.log
[ "$(left)" -gt 120 ] || exit 0
timeout $(( $(left) - 10 )) $B --shapes dsv3_prefill --ep 2 --ops w13_bwd_pair_fp8,w2_bwd_pair_fp8 \
  --backward-pair 66,80,92,104 $common > $L/pair_dsv3_ep2.log 2>&1
echo "dsv3_prefill ep2 rc=$?"; grep -E "^pair|Error|error" $L/pair_dsv3_ep2.log
