#!/usr/bin/env bash
# s77 n2, for branch g159 (main + G159; not run when written): the `_p64` W13 kernels on the pipelined quarters
# loop. (1) gtests: every FP8-blockwise W13 configuration and the promotion-interval case (the 64 count must
# stay between 128's and 32's); (2) the MXFP8 training suite: its margins must equal s77 n1's at 64 case for
# case if the quarters keep the serial loop's bits; (3) the W13 GEMM at 128 / 64 / 32 beside our BF16 pick,
# two rounds; (4) the MXFP8 layer at qwen3_30b, A = DMOE_W13_PROMOTE_K=128 / B = default (64). Any card; ~300 s.
RUN_NAME=n2; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_gpu_tests bench_grouped_gemm dist-moe dmoe_launch dist_moe_mxfp8_pipeline_tests \
  || exit 1
echo "built at $((SECONDS-T0)) s"
gtests w13 'GroupedGemmFp8.W13PromotionIntervals:GroupedGemmFp8W13*:GroupedGemmFp8.Heuristic*' 150
grep -E "promotion every" $L/gtest_w13.log | head -3
suite_cases mxfp8_train dist_moe_mxfp8_pipeline_tests 100 > $L/cases.txt
head -1 $L/cases.txt
grep -o "case [A-Za-z0-9_]* ([^)]*) \[max relL2 vs [a-z0-9_]* oracle: out [0-9.e+-]*" $L/cases.txt |
  sed -E 's/ \([^)]*\) \[max relL2 vs [a-z0-9_]* oracle: out/:/; s/^case //' | tr '\n' ' '; echo
timeout 90 build-gpu/bench/bench_grouped_gemm --shapes qwen3_30b,mixtral,dsv3_prefill --routing balanced \
  --ops w13_fprop_mxfp8s --sweep --sweep-match 128x256x128_s4_tma_dyn --rounds 2 > $L/gemm_w13.log 2>&1
echo "gemm w13 rc=$? at $((SECONDS-T0)) s"; grep -E "w13_fprop_mxfp8s" $L/gemm_w13.log | sed -E 's/ +/ /g' | cut -c1-160
env_arm .envW DMOE_W13_PROMOTE_K=128 dist-moe
arm_dir() { case $1 in W) echo .envW;; B) echo build-gpu;; esac; }
ARM_TIMEOUT=50 arm_rounds "mxfp8 qwen3_30b" 1 "W B" "^forward\+backward|^fwd:w13 |^BF16 layer forward\+backward" \
  dist-moe bench --shape qwen3_30b --format mxfp8 --no-baseline --iters 3 --sustain-ms 100
