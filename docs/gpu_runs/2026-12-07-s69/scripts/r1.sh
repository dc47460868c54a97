#!/usr/bin/env bash
# s69 r1: what s68's H100 run left owed. (1) G140 on the H200: the dsv3_prefill EP1 FP8-blockwise
# layer, A = main with G140 reversed (the FP8 WGRAD's 128x256 pick everywhere), B = main (128x128 s5 at
# <= 256 token rows per expert), alternated, two rounds, with the BF16 layer's ratio per run; the
# WGRAD sweep at those sizes. (2) G142's ncu page: the qwen3_30b EP1 FP8 W13 WGRAD (BF16 gradients
# accumulated, main's 128x256 pick): where its time goes. (3) With time left, main's FP8 gtests and the
# FP8-blockwise training suite on this card. BUDGET (the prelude's left()) trims the later steps.
RUN_NAME=s69r1; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/ab_trees.sh docs/gpu_runs/2026-12-06-s66/g140_fp8_wgrad_short_k_128x128.patch \
  "dist-moe dmoe_launch bench_grouped_gemm dist_moe_gpu_tests dist_moe_fp8_blockwise_training_tests" "dist-moe" ||
  { tail -20 "$L/build.log" "$L/A/build.log"; exit 1; }
echo "built at $((SECONDS-T0)) s"
[ "$(left)" -gt 60 ] && LAYER_AB_TIMEOUT=45 scripts/layer_ab_rounds.sh dsv3_prefill_fp8bw .abtree/build-ab build-gpu 2 \
  $L/layer_dsv3.log --shape dsv3_prefill --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100
grep -E '^bwd:w(13|2)_wgrad ' $L/layer_dsv3.log 2>/dev/null | sed 's/^/  /'
[ "$(left)" -gt 60 ] && wgrad_sweep ep1 40 --ep 1 --shapes dsv3_prefill --iters 5 --sustain-ms 100
if [ "$(left)" -gt 90 ]; then
  K2='Sm90Fp8BlockwiseMainloop<dist_moe::gemm::MainloopConfig<\(dist_moe::gemm::GemmKind\)2, \(int\)128, \(int\)256'
  timeout 80 ncu --clock-control none --kernel-name-base demangled -k "regex:$K2" --launch-skip 3 -c 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section SourceCounters --section MemoryWorkloadAnalysis_Tables \
    --metrics lts__t_sectors_op_red.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    -o $L/wgrad_qwen3 build-gpu/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b \
    --routing balanced --ops w13_wgrad_fp8 --wgrad-accumulate --fp8-wgrad-bf16 --iters 4 --sustain-ms 0 \
    > $L/wgrad_qwen3_run.txt 2>&1
  echo "ncu wgrad_qwen3 rc=$? at $((SECONDS-T0)) s"
  ncu_pages wgrad_qwen3 40
  grep -E "SM Frequency|Duration|DRAM Th|L2 Cache Th|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|lts__t_sectors_op|dram__bytes" \
    $L/ncu_wgrad_qwen3_details.txt | head -14
  head -25 $L/ncu_wgrad_qwen3_by_line.txt
fi
[ "$(left)" -gt 100 ] && gtests fp8 'GroupedGemmFp8*' 90
[ "$(left)" -gt 80 ] && layer_suite fp8bw_train dist_moe_fp8_blockwise_training_tests B 70
