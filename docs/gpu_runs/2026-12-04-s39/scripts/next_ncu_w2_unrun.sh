#!/usr/bin/env bash
# Unrun (for the next session): where the short-K block-scaled W2 decode GEMM loses its time at
# qwen3_30b T = 128 (NVFP4 on expanded rows, three k blocks per tile; MXFP8 beside it, six): ncu stall
# reasons per kernel and the source-level stall samples, to place the ~2-5 us per tile and ~20 us per
# kernel that G92 / G93 did not explain (perf_history G93's note). Assumes build-gpu exists (run1.sh's
# build lines first).
O=${OUT:-/tmp/o}; L=/tmp/next_ncu; mkdir -p $O $L
export PATH=/usr/local/cuda/bin:$PATH
reasons=""; for r in barrier long_scoreboard wait math_pipe_throttle membar sleeping mio_throttle short_scoreboard selected dispatch_stall no_instructions misc lg_throttle drain branch_resolving; do reasons+="${reasons:+,}smsp__pcsamp_warps_issue_stalled_$r"; done
for op in w2_fprop_nvfp4x w2_fprop_mxfp8; do
  timeout 120 ncu --kernel-name-base demangled -k "regex:SwapAB" -c 1 --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section SourceCounters --metrics "$reasons" --import-source no -o $L/$op \
    build-gpu/bench/bench_grouped_gemm --ep 1 --routing random --rounds 1 --iters 1 --shapes qwen3_30b --tokens 128 --ops $op \
    > $L/ncu_$op.txt 2>&1
  echo "ncu $op rc=$?"; grep -E "smsp__pcsamp_warps_issue_stalled" $L/ncu_$op.txt | sort -k3 -rn | head -10
  timeout 60 ncu --import $L/$op.ncu-rep --page source --print-source sass --csv > $L/source_$op.csv 2>&1
done
tar -czf $O/logs.tar.gz -C $L .
