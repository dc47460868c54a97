#!/usr/bin/env bash
# s77 r4: why the quantizers below 0.85x the copy on the H200 (s76 r1: 18 of 36) are there -- one ncu
# profile of each one's kernel at qwen3_30b (issue slots, pipes, stalls, instructions, DRAM), on
# whichever card comes (the instruction and issue figures carry over; an H100's DRAM share is lower).
# Then bench_quantize's whole table if time is left. Any card; ~200 s on a fresh machine.
RUN_NAME=r4; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh bench_quantize || exit 1
echo "built at $((SECONDS-T0)) s"
stalls=long_scoreboard,short_scoreboard,barrier,mio_throttle,lg_throttle,math_pipe_throttle,wait,not_selected,selected,dispatch_stall,no_instruction,drain,membar,branch_resolving,tex_throttle
m=dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active
m=$m,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active
m=$m,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active
for s in ${stalls//,/ }; do m=$m,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio; done
ncu_case() {  # ncu_case TAG KERNEL-REGEX CASE [COUNT]: COUNT (1) launches of the case's kernel at qwen3_30b
  local tag=$1 k=$2 c=$3 n=${4:-1}
  [ "$(left)" -gt 45 ] || return 0
  timeout 90 ncu --clock-control none --kernel-name-base demangled -k "regex:$k" --launch-skip 1 -c $n \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section Occupancy --section LaunchStats --metrics $m \
    build-gpu/bench/bench_quantize --shapes qwen3_30b --cases "$c" --iters 1 --sustain-ms 0 > $L/ncu_$tag.txt 2>&1
  if grep -q "==ERROR==.*metric" $L/ncu_$tag.txt; then  # a metric this ncu does not know: the sections alone
    grep "==ERROR==" $L/ncu_$tag.txt | head -2; m=smsp__inst_executed.sum
    timeout 90 ncu --clock-control none --kernel-name-base demangled -k "regex:$k" --launch-skip 1 -c $n \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      --section Occupancy --section LaunchStats --metrics $m \
      build-gpu/bench/bench_quantize --shapes qwen3_30b --cases "$c" --iters 1 --sustain-ms 0 > $L/ncu_$tag.txt 2>&1
  fi
  echo "ncu $tag rc=$? at $((SECONDS-T0)) s: $(grep -E "^ +(Duration|DRAM Throughput|Issue Slots Busy|No Eligible|Registers Per Thread|Achieved Occupancy|smsp__inst_executed.sum|sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active|sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active|sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active|sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active|sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active) " $L/ncu_$tag.txt | sed -E 's/ +/ /g;s/sm__|smsp__|_cycles_active|\.avg\.pct_of_peak_sustained_active|inst_executed_//g' | tr '\n' ';')"
  echo "   stalls per issue: $(grep -E "smsp__average_warps_issue_stalled_" $L/ncu_$tag.txt | sed -E 's/ +/ /g;s/smsp__average_warps_issue_stalled_//;s/_per_issue_active.ratio//' | awk '$3+0 >= 0.15 {printf "%s %s; ", $1, $3}')"
}
ncu_case mxfp8_fused swiglu_backward_quantize_kernel mxfp8_fused
ncu_case fp8bw_fused swiglu_backward_quantize_kernel fp8bw_fused
ncu_case nvfp4_w nvfp4_weight_pipelined_kernel nvfp4_w
ncu_case nvfp4_token_rows nvfp4_rows_kernel nvfp4_token_rows
ncu_case mxfp8_w_train_t mxfp8_weight_tiles_kernel mxfp8_w_train_t
ncu_case mxfp8_cols_shared mxfp8_columns_to_fp8_blockwise_kernel mxfp8_cols_shared
ncu_case nvfp4_expand_rows expand_nvfp4_rows_kernel nvfp4_expand_rows
ncu_case mxfp8_rows_cols_g quantize_rows_cols_kernel mxfp8_rows_cols_g
ncu_case mxfp8_rows_cols quantize_rows_cols_kernel mxfp8_rows_cols
[ "$(left)" -gt 100 ] && { timeout $(( $(left) - 10 )) build-gpu/bench/bench_quantize --shapes qwen3_30b,dsv3_prefill \
  > $L/quant_table.log 2>&1; echo "table rc=$?"; sed -n '/^summary/,$p' $L/quant_table.log; }
