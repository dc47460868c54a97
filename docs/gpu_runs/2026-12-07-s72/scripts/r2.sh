#!/usr/bin/env bash
# s72 r2: G151 after r1's findings -- the MXFP8 training suite again (its forward bound now FP8 blockwise's,
# the inference context against the training forward within it) and the torch Mega tests (Mega training
# against a staged context on the per-32 FPROPs); the MXFP8 layer A / B at mixtral and dsv3_prefill with 128
# experts (A: DMOE_MXFP8_FPROP_PER32=1; B: default); the GEMM table's FPROP rows as the layer runs them (ops
# *_fprop_mxfp8s: shared rows and weights on the FP8-blockwise FPROP) beside the per-32 FPROP and our BF16
# FPROP at the per-rank EP2 sizes; the torch training loop.
RUN_NAME=s72r2; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist-moe dmoe_launch dist_moe_mxfp8_pipeline_tests bench_grouped_gemm \
  dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
layer_suite mxfp8_train dist_moe_mxfp8_pipeline_tests B 200
pytest_log torch_mega 60 "$PWD/tests/torch/test_mega.py"
[ "$(left)" -gt 90 ] && timeout 80 build-gpu/bench/bench_grouped_gemm --shapes qwen3_30b,mixtral,dsv3_prefill --ep 2 \
  --routing balanced --ops w13_fprop_mxfp8,w2_fprop_mxfp8,w13_fprop_mxfp8s,w2_fprop_mxfp8s --rounds 2 --iters 5 \
  --sustain-ms 100 --sweep-match no_sweep > $L/fprop_table.log 2>&1
echo "bench rc=$?"; grep -E "^fp8 .*\(pick\)" $L/fprop_table.log | sed -E 's/ +/ /g' | cut -d' ' -f2,4,5,7,11,14,15
env_arm .envA DMOE_MXFP8_FPROP_PER32=1 dist-moe
arm_dir() { case $1 in A) echo .envA;; B) echo build-gpu;; esac; }
lines="^forward\+backward|^fwd:w2 |^fwd:w13 |^BF16 layer forward\+backward"
ARM_TIMEOUT=70 ab_layer_rounds "mxfp8 mixtral" 1 "$lines" --shape mixtral --format mxfp8 --no-baseline --iters 3 --sustain-ms 100
ARM_TIMEOUT=90 ab_layer_rounds "mxfp8 dsv3_prefill E128" 1 "$lines" --shape dsv3_prefill --experts 128 --format mxfp8 \
  --no-baseline --iters 3 --sustain-ms 100
[ "$(left)" -gt 40 ] && pytest_log torch_training_loop $(( $(left) - 10 )) "$PWD/tests/torch/test_training_loop.py"
