#!/usr/bin/env bash
# s77 n1, for branch s77dev (main + g157's G156-G157 + p64's G158; written in s77, which was lent no device):
# both pending kernel changes in one build, each with its own A / B switch -- DMOE_QUANT_GATHER_PLAIN=1 (main's
# gathered quantizers) and DMOE_W13_PROMOTE_K=128 (main's MXFP8 W13). In order of what decides a merge:
# (1) gtests: the gathered / compact quantizers (level order against the strided row-order kernel, bit for bit),
#     the W13 promotion-interval case (h1 elements off the exact BF16 rounding at 128 / 64 / 32) and every
#     FP8-blockwise W13 configuration;
# (2) the MXFP8 training suite, its forward now held to the 5e-3 (margins per case), and the
#     FP8-blockwise training suite;
# (3) the W13 GEMM as the MXFP8 layer runs it, 128x256 s4 at 128 / 64 / 32 beside our BF16 pick;
# (4) the layers at qwen3_30b, one round per arm, our BF16 layer in each process: FP8 blockwise A / B of the
#     quantizers, MXFP8 A / B of the W13 interval;
# (5) bench_quantize's gathered rows A / B; (6) the MXFP8 suite's margins at DMOE_W13_PROMOTE_K=32, then the
#     FP8-blockwise suite's at 64 (the CPU model, sim/tc_accumulation_sim.cpp, predicts both per case: G158).
# Any card; ~540 s on a fresh machine (BUDGET=560).
RUN_NAME=n1; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_gpu_tests bench_quantize bench_grouped_gemm dist-moe dmoe_launch \
  dist_moe_mxfp8_pipeline_tests dist_moe_fp8_blockwise_training_tests || exit 1
echo "built at $((SECONDS-T0)) s"
gtests dev 'Quantize*Gathered*:Quantize*Compact*:GroupedGemmFp8.W13PromotionIntervals:GroupedGemmFp8W13*' 150
grep -E "promotion every|h1 elements off" $L/gtest_dev.log | head -5
suite() {  # suite LABEL TEST LIMIT: suite_cases; its verdict, case counts, largest forward margin, each case's
  suite_cases "$@" > $L/cases_$1.txt
  echo "$(head -1 $L/cases_$1.txt) | PASS cases $(grep -c 'PASS case' $L/cases_$1.txt), FAIL $(grep -c 'FAIL case' $L/cases_$1.txt);" \
    "largest out vs oracle: $(grep -o 'oracle: out [0-9.e+-]*' $L/cases_$1.txt | awk '{if ($3 + 0 > m) m = $3 + 0} END {print m}')"
  grep -o "case [A-Za-z0-9_]* ([^)]*) \[max relL2 vs [a-z0-9_]* oracle: out [0-9.e+-]*" $L/cases_$1.txt |
    sed -E 's/ \([^)]*\) \[max relL2 vs [a-z0-9_]* oracle: out/:/; s/^case //' | tr '\n' ' '; echo
}
suite mxfp8_train dist_moe_mxfp8_pipeline_tests 100
suite fp8bw_train dist_moe_fp8_blockwise_training_tests 60
[ "$(left)" -gt 120 ] && { timeout 90 build-gpu/bench/bench_grouped_gemm --shapes qwen3_30b,mixtral,dsv3_prefill \
  --routing balanced --ops w13_fprop_mxfp8s --sweep --sweep-match 128x256x128_s4_tma --rounds 2 > $L/gemm_w13.log 2>&1
  echo "gemm w13 rc=$? at $((SECONDS-T0)) s"; grep -E "w13_fprop_mxfp8s" $L/gemm_w13.log | sed -E 's/ +/ /g' | cut -c1-160; }
env_arm .envQ DMOE_QUANT_GATHER_PLAIN=1 dist-moe bench/bench_quantize
env_arm .envW DMOE_W13_PROMOTE_K=128 dist-moe
env_arm .envP DMOE_W13_PROMOTE_K=32 tests/dist_moe_mxfp8_pipeline_tests
env_arm .envS DMOE_W13_PROMOTE_K=64 tests/dist_moe_fp8_blockwise_training_tests
arm_dir() { case $1 in Q) echo .envQ;; W) echo .envW;; P) echo .envP;; S) echo .envS;; B) echo build-gpu;; esac; }
lines="^forward\+backward|^fwd:quantize_x|^fwd:w13 |^bwd:quantize_grad_h3|^BF16 layer forward\+backward"
ARM_TIMEOUT=50 arm_rounds "fp8bw qwen3_30b" 1 "Q B" "$lines" dist-moe bench --shape qwen3_30b --format fp8_blockwise \
  --no-baseline --iters 3 --sustain-ms 100
ARM_TIMEOUT=50 arm_rounds "mxfp8 qwen3_30b" 1 "W B" "$lines" dist-moe bench --shape qwen3_30b --format mxfp8 \
  --no-baseline --iters 3 --sustain-ms 100
ARM_TIMEOUT=40 arm_rounds quant 1 "Q B" "_rows_cols" bench/bench_quantize --shapes qwen3_30b,dsv3_prefill \
  --cases fp8bw_rows_cols,fp8bw_rows_cols_gc,fp8bw_rows_cols_gk,mxfp8s_rows_cols_gk
[ "$(left)" -gt 100 ] && { layer_suite mxfp8_train_p32 dist_moe_mxfp8_pipeline_tests P $(( $(left) - 10 ));
  grep -o "case [A-Za-z0-9_]* ([^)]*) \[max relL2 vs [a-z0-9_]* oracle: out [0-9.e+-]*" $L/suite_mxfp8_train_p32_P.log |
    sed -E 's/ \([^)]*\) \[max relL2 vs [a-z0-9_]* oracle: out/:/; s/^case //' | tr '\n' ' '; echo; }
[ "$(left)" -gt 60 ] && { layer_suite fp8bw_train_p64 dist_moe_fp8_blockwise_training_tests S $(( $(left) - 10 ));
  grep -o "case [A-Za-z0-9_]* ([^)]*) \[max relL2 vs [a-z0-9_]* oracle: out [0-9.e+-]*" $L/suite_fp8bw_train_p64_S.log |
    sed -E 's/ \([^)]*\) \[max relL2 vs [a-z0-9_]* oracle: out/:/; s/^case //' | tr '\n' ' '; echo; }
