#!/usr/bin/env bash
# s48 run 1 (measurement, no code change): (1) the MXFP8 prefill GEMM table over interleaved rounds,
# balanced then random rows (s47's run8.sh, not run; RUN1_GEMM_TABLE=1 only: the G107 run sweeps the
# same configurations); (2) today's quantizer table (issue #24); (3) ncu
# of the fused SwiGLU backward + dxy quantizers at qwen3_30b (MXFP8 0.67x copy against FP8
# blockwise's 0.78x with the same structure: where the difference goes); (4) the FP8-blockwise
# training layer at qwen3_30b, today's stage table. RUN1_BUDGET_S: this call's device time.
RUN_NAME=s48r1; source scripts/device_run_prelude.sh
left() { echo $((${RUN1_BUDGET_S:-480} - (SECONDS - T0))); }
OUT=$L scripts/quick_build.sh bench_quantize dist-moe dmoe_launch $([ "${RUN1_GEMM_TABLE:-0}" = 1 ] && echo bench_grouped_gemm) || exit 1
echo "built at $((SECONDS-T0)) s"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for routing in $([ "${RUN1_GEMM_TABLE:-0}" = 1 ] && echo balanced random); do
  [ "$(left)" -gt 200 ] || { echo "skip $routing"; continue; }
  timeout 110 build-gpu/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral,dsv3_prefill --routing $routing \
    --rounds 2 --sustain-ms 50 --ops w13_fprop_mxfp8,w2_fprop_mxfp8,w13_dgrad_mxfp8,w2_dgrad_mxfp8 > $L/gemm_table_mxfp8_$routing.log 2>&1
  echo "gemm table mxfp8 $routing rc=$? at $((SECONDS-T0)) s:"
  grep -E "^fp8 .*(\(pick\)|_tma_dyn )|targets met" $L/gemm_table_mxfp8_$routing.log | sed -E "s/ +/ /g" | cut -c1-160
done
if [ "$(left)" -gt 120 ]; then
  timeout 90 build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 --sustain-ms 100 > $L/quantize.log 2>&1
  echo "bench_quantize rc=$? at $((SECONDS-T0)) s"; grep -E "x copy|fused|two_passes|swiglu_bwd|>= 0.85" $L/quantize.log | head -60
fi
if [ "$(left)" -gt 60 ]; then
  reasons=""; for r in barrier long_scoreboard wait math_pipe_throttle membar sleeping mio_throttle short_scoreboard selected no_instructions lg_throttle; do reasons+="${reasons:+,}smsp__pcsamp_warps_issue_stalled_$r"; done
  for fmt in Mxfp8 Fp8Blockwise; do
    timeout 45 ncu --kernel-name-base demangled -k "regex:swiglu_backward_quantize_kernel<.*$fmt" -s 2 -c 1 --section SpeedOfLight \
      --section WarpStateStats --section MemoryWorkloadAnalysis --section SourceCounters --section ComputeWorkloadAnalysis \
      --metrics "$reasons" -o $L/ncu_dxy_$fmt build-gpu/bench/bench_quantize --shapes qwen3_30b --iters 3 --sustain-ms 0 \
      > $L/ncu_dxy_$fmt.txt 2>&1
    echo "ncu dxy $fmt rc=$? at $((SECONDS-T0)) s"
    timeout 20 ncu --import $L/ncu_dxy_$fmt.ncu-rep --page details > $L/details_dxy_$fmt.txt 2>&1
    timeout 30 ncu --import $L/ncu_dxy_$fmt.ncu-rep --page source --csv --print-source sass > $L/source_dxy_$fmt.csv 2>&1
    grep -E "Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|Warp Cycles Per Issued|Eligible Warps|Achieved Occupancy|SM Frequency" $L/details_dxy_$fmt.txt | head -12
  done
fi
if [ "$(left)" -gt 30 ]; then
  timeout $(( $(left) - 5 )) build-gpu/dist-moe bench --shape qwen3_30b --mode train --format fp8_blockwise --no-baseline \
    --iters 5 --sustain-ms 100 > $L/layer_qwen3_fp8.log 2>&1
  echo "layer qwen3 fp8 rc=$? at $((SECONDS-T0)) s"; sed -n '/^stage (eager)/,$p' $L/layer_qwen3_fp8.log | head -40
fi
