#!/usr/bin/env bash
# s76 r2 (ran on branch g156, a474ecd, whose knobs it sets): G156 / G157 -- the gathered rows + columns quantizers' L2 levers, as env arms of one build: A (main's
# behaviour), B (evict-last source reads + the persisting L2 set-aside at its maximum), C (outputs stored
# evict-first), E (G157: row tiles in level order), F (E + C). bench_quantize's _gk / contiguous rows, two rounds alternated; ncu of the _gk kernel
# in every arm (DRAM bytes, L2 hit rate); the FP8-blockwise training layer at qwen3_30b in every arm (two rounds
# as time allows); then the FP8-blockwise training suite under F (values must not change). Any card; ~420 s.
RUN_NAME=r2; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh bench_quantize dist-moe dmoe_launch dist_moe_fp8_blockwise_training_tests || exit 1
echo "built at $((SECONDS-T0)) s"
envB="DMOE_QUANT_GATHER_EVICT_LAST=1 DMOE_QUANT_L2_SET_ASIDE=1"
envC="DMOE_QUANT_STREAM_STORES=1"
envE="DMOE_QUANT_LEVEL_ORDER=1"
envF="$envE $envC"
for a in B C E F; do v=env$a; env_arm .env$a "${!v}" bench/bench_quantize dist-moe tests/dist_moe_fp8_blockwise_training_tests; done
arm_dir() { case $1 in A) echo build-gpu;; *) echo .env$1;; esac; }
cases=fp8bw_rows_cols,fp8bw_rows_cols_gk,mxfp8s_rows_cols_gk
ARM_TIMEOUT=60 arm_rounds quant 2 "A B C E F" "_rows_cols" bench/bench_quantize --shapes qwen3_30b,dsv3_prefill --cases $cases
grep -h "G156" $L/quant_B1.log | head -1
ncu_case() {  # ncu_case TAG ENV CASE: one launch of CASE's kernel at qwen3_30b under ENV
  local tag=$1 env=$2 c=$3
  [ "$(left)" -gt 200 ] || return 0
  timeout 60 env $env ncu --clock-control none -k "regex:quantize_rows_cols_kernel" --launch-skip 1 -c 1 \
    --section SpeedOfLight --section SchedulerStats \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum \
    build-gpu/bench/bench_quantize --shapes qwen3_30b --cases "$c" --iters 1 --sustain-ms 0 > $L/ncu_$tag.txt 2>&1
  echo "ncu $tag rc=$?: $(grep -E "^ +(Duration|DRAM Throughput|No Eligible|dram__bytes_read.sum|dram__bytes_write.sum|lts__t_sectors_srcunit_tex_op_read.sum|lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum) " $L/ncu_$tag.txt | sed -E 's/ +/ /g' | tr '\n' ';')"
}
ncu_case gk_A "" fp8bw_rows_cols_gk
ncu_case gk_B "$envB" fp8bw_rows_cols_gk
ncu_case gk_C "$envC" fp8bw_rows_cols_gk
ncu_case gk_E "$envE" fp8bw_rows_cols_gk
ncu_case gk_F "$envF" fp8bw_rows_cols_gk
lines="^forward\+backward|^fwd:quantize_x|^fwd:w13 |^bwd:quantize_grad_h3|^BF16 layer forward\+backward"
ARM_TIMEOUT=60 arm_rounds "fp8bw qwen3_30b" 2 "A C E F B" "$lines" dist-moe bench --shape qwen3_30b --format fp8_blockwise \
  --no-baseline --iters 3 --sustain-ms 100
[ "$(left)" -gt 60 ] && { layer_suite fp8bw_train_F dist_moe_fp8_blockwise_training_tests F $(( $(left) - 10 )); }
