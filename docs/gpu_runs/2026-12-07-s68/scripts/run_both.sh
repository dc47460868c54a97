#!/usr/bin/env bash
# s68 (written in s67, never run there): G140 and G141 in one call on whatever card comes (one build: the two patches touch disjoint
# paths -- G140 the FP8-blockwise WGRAD's pick, G141 the NVFP4 Mega kernel's epilogue loads -- so B =
# main + both is each one's B arm). A = main. G141 (any card's A / B counts), then G140 (owed on
# the H200; on an H100 its layer A / B is new: s66 measured only the sweep there). Steps as s66's
# run2.sh / run3.sh, trimmed to one call. With less than ~600 s of device time left, call it with a lower
# BUDGET (the prelude's left()): later steps are skipped. s68 added G142's written-against-
# accumulated WGRADs and G143's start stagger (a knob in B, off by default), first after the build: qwen3_30b's
# FP8 WGRAD is issue #27's one gap within reach.
RUN_NAME=s68both; source scripts/device_run_prelude.sh
S66=docs/gpu_runs/2026-12-06-s66
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
cat $S66/g140_fp8_wgrad_short_k_128x128.patch $S66/g141_mega_early_epilogue_loads.patch \
  docs/gpu_runs/2026-12-07-s68/g143_wgrad_start_stagger.patch > $L/g140_g141_g143.patch
ab_patch_trees $L/g140_g141_g143.patch "dist-moe dmoe_launch bench_grouped_gemm dist_moe_gpu_tests \
  dist_moe_fp8_blockwise_training_tests dist_moe_nvfp4_pipeline_tests" "dist-moe"
# G142, cheap first: the qwen3_30b EP1 FP8 WGRADs writing their BF16 gradients against adding into them
# (alternated, two rounds each): what the old gradients' reads and the L2's reduce-adds cost over plain
# stores of the same tiles (the written case moves half the bytes).
if [ "$(left)" -gt 110 ]; then
  for r in 1 2; do
    for acc in "" --wgrad-accumulate; do
      timeout 25 build-gpu/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b --routing balanced \
        --ops w13_wgrad_fp8,w2_wgrad_fp8 --fp8-wgrad-bf16 $acc --iters 10 --sustain-ms 100 > $L/wgrad_written_$r$acc.log 2>&1
      echo "wgrad qwen3 r$r ${acc:-written} rc=$?"; grep -E '^fp8 ' $L/wgrad_written_$r$acc.log | head -4 | sed 's/^/  /'
    done
  done
fi
# G143 (B's knob, off by default, so B with 0 is G140 + G141 only): the accumulating qwen3_30b EP1 FP8
# WGRADs with the CTAs' starts spread over 0 / ~half / ~one tile of SM cycles, alternated, two rounds.
if [ "$(left)" -gt 100 ]; then
  for r in 1 2; do
    for sc in 0 7000 14000; do
      DMOE_WGRAD_START_STAGGER=$sc timeout 25 build-gpu/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b \
        --routing balanced --ops w13_wgrad_fp8,w2_wgrad_fp8 --fp8-wgrad-bf16 --wgrad-accumulate --iters 10 \
        --sustain-ms 100 > $L/wgrad_stagger_${r}_$sc.log 2>&1
      echo "wgrad qwen3 r$r stagger $sc rc=$?"; grep -E '^fp8 ' $L/wgrad_stagger_${r}_$sc.log | head -4 | sed 's/^/  /'
    done
  done
fi
# G141: B's NVFP4 / Mega gtests (Mega bitwise against the staged sequences) and NVFP4 suite; Mega
# against staged alternated in one process, A / B.
[ "$(left)" -gt 130 ] && gtests nvfp4 'GroupedGemmNvfp4*:Mega*:Nvfp4ExpandRows*' 120
[ "$(left)" -gt 160 ] && nvfp4_suite B 150
mega_rounds nvfp4 3 2
# G140: B's FP8 GEMM gtests and FP8-blockwise training suite; the WGRAD sweep at dsv3_prefill EP1 sizes
# (both tiles, one process); the dsv3_prefill EP1 FP8-blockwise layer A / B.
[ "$(left)" -gt 100 ] && gtests fp8 'GroupedGemmFp8*' 90
[ "$(left)" -gt 80 ] && layer_suite fp8bw_train dist_moe_fp8_blockwise_training_tests B 70
[ "$(left)" -gt 60 ] && wgrad_sweep ep1 40 --ep 1 --shapes dsv3_prefill --iters 5 --sustain-ms 100
[ "$(left)" -gt 50 ] && LAYER_AB_TIMEOUT=45 scripts/layer_ab_rounds.sh dsv3_prefill_fp8bw .abtree/build-ab build-gpu 2 \
  $L/layer_dsv3.log --shape dsv3_prefill --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100
grep -E '^bwd:w(13|2)_wgrad ' $L/layer_dsv3.log 2>/dev/null | sed 's/^/  /'
# With time left: where the FP8 WGRAD's time goes at qwen3_30b EP1 (512 rows per expert, four k blocks
# per 128x256 tile: issue #27's WGRAD gap; the plan in perf_history G142 wants the epilogue's and the
# fold's shares) -- ncu source page of the W13 WGRAD, BF16 gradients accumulated, on B (the pick there
# is main's 128x256).
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
