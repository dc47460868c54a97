#!/usr/bin/env bash
# Run in s46 r3 with no kernel profiled (below); fixed, for the next call (for the next session, after ../../2026-12-05-s44/scripts/run1.sh's build): why Mega's one launch at qwen3_30b T = 128
# (MXFP8, the 16-token decode tiles) takes ~0.213 ms where the staged W13 + W2 take ~0.200 (s43 r0b,
# perf_history G98): per kernel the duration, DRAM throughput and warp stall reasons of the Mega
# launch and of the staged W13 / W2 decode GEMMs, on the same routing (one bench process each).
O=${OUT:-/tmp/o}; L=/tmp/next_ncu_mega; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
# NCU_STEP_S: seconds per profiled process (default 200), for callers inside a device call's limit.
reasons=""; for r in barrier long_scoreboard wait math_pipe_throttle membar sleeping mio_throttle short_scoreboard selected no_instructions lg_throttle; do reasons+="${reasons:+,}smsp__pcsamp_warps_issue_stalled_$r"; done
# Session 45 (perf_history G100): NVFP4 too, and the source counters, whose stall samples per SASS line
# say whether the decode form's arrival after each W13 tile (membar / the barrier after the atomic) or
# the finisher hand-off holds the consumers.
# Session 46: s46 r3 profiled nothing ("No kernels were profiled"): `dist-moe bench` runs the layer in
# child processes under dmoe_launch. Now `dist-moe bench-rank` (one rank, no launcher), and a kernel
# filter per side: the Mega launch, or the staged block-scaled GEMMs of the format (not our BF16
# layer's kernels, which bench-rank times alongside).
for f in mxfp8 nvfp4; do
for p in mega staged; do
  if [ $p = mega ]; then k="regex:sm90_mega"; else k="regex:sm90_grouped_gemm.*${f^}"; fi
  timeout ${NCU_STEP_S:-200} ncu --kernel-name-base demangled -k "$k" -s 2 -c 2 \
    --section SpeedOfLight --section WarpStateStats --section LaunchStats --section SourceCounters \
    --metrics "$reasons" -o $L/${f}_$p \
    build-gpu/dist-moe bench-rank --shape qwen3_30b --tokens 128 --mode infer --format $f --iters 2 \
    --sustain-ms 0 --pipeline $p > $L/ncu_${f}_$p.txt 2>&1
  echo "ncu $f $p rc=$?"
  timeout 30 ncu --import $L/${f}_$p.ncu-rep --print-summary per-kernel > $L/summary_${f}_$p.txt 2>&1
  timeout 30 ncu --import $L/${f}_$p.ncu-rep --page details > $L/details_${f}_$p.txt 2>&1
  timeout 40 ncu --import $L/${f}_$p.ncu-rep --page source --csv --print-source sass > $L/source_${f}_$p.csv 2>&1
  grep -E "Duration|DRAM Throughput|Registers Per|sm90_" $L/summary_${f}_$p.txt | cut -c1-200 | head -24
done
done
tar -czf $O/logs.tar.gz -C $L .
