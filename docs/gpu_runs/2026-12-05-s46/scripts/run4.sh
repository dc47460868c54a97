#!/usr/bin/env bash
# s46 run 4: (1) the FP8 decode tiles at dsv3 dims, 8 rows per expert (EP2 sizes, T = 128): does W2
# (K = F) want the 128x256 tile even there, as at qwen3_30b's 8 / 16 rows and dsv3's 16 (run 3)?
# (2) today's MXFP8 prefill GEMM table (EP2 sizes, three shapes, balanced rows; every compiled configuration of the format against our BF16 pick of the same op),
# to refresh docs/perf.md's rows (MXFP8's was session 18's); (3) the Mega ncu script, fixed to
# profile bench-rank (s46 r3 profiled nothing), with what time is left.
RUN_NAME=s46r4; source scripts/device_run_prelude.sh
left() { echo $((${RUN4_BUDGET_S:-470} - (SECONDS - T0))); }  # (less device time left this session than a full call)
OUT=$L scripts/quick_build.sh all || exit 1
# perf_history G102: Mega training's backward runs the staged W2 DGRAD + SwiGLU backward pair unless
# DMOE_MEGA_FUSED_DGRAD_SWIGLU=1. The emulated Mega cases (training included: bitwise against staged)
# and the torch Mega tests with the default, then the A/B: the Mega training bench (alternated with
# the staged layer in one process) with the fused launch off and on, twice.
DMOE_COMM_TIMEOUT_MS=10000 timeout 100 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='*EmulatedPeers*mega*' \
  > $L/emulated_mega.log 2>&1
echo "emulated mega rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/emulated_mega.log | tr '\n' ' ')"
PYTHONPATH=$PWD/python timeout 100 python3 -m pytest -q -x tests/torch/test_mega.py > $L/torch_mega.log 2>&1
echo "torch mega rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch_mega.log)"
for r in $(seq ${RUN4_ROUNDS:-2}); do
  for k in 0 1; do
    DMOE_MEGA_FUSED_DGRAD_SWIGLU=$k timeout 100 build-gpu/dist-moe bench --shape qwen3_30b --mode train --format mxfp8 \
      --no-baseline --iters 10 --sustain-ms 50 --pipeline mega > $L/layer_qwen3_train_fused$k.$r.log 2>&1
    echo "qwen3 train mega fused=$k rc=$? at $((SECONDS-T0)) s: $(grep -E '^(forward\+backward|staged layer) ' \
      $L/layer_qwen3_train_fused$k.$r.log | sed -E 's/ +/ /g' | cut -d' ' -f1-5 | tr '\n' ';')"
    echo "   $(grep -E '^(fwd:mega|bwd:mega|bwd:w2_dgrad|bwd:swiglu)' $L/layer_qwen3_train_fused$k.$r.log | awk '{printf "%s %s; ", $1, $2}')"
  done
done
timeout 100 build-gpu/bench/bench_grouped_gemm --shapes dsv3_decode --ep 2 --tokens 128 --routing random \
  --ops w13_fprop_fp8,w2_fprop_fp8 --sweep --sweep-match _s --rounds 2 > $L/gemm_dsv3_t128_ep2_fp8.log 2>&1
echo "gemm dsv3 T128 EP2 fp8 rc=$? at $((SECONDS-T0)) s:"
grep -E "^bs " $L/gemm_dsv3_t128_ep2_fp8.log | sed -E "s/ +/ /g" | cut -d' ' -f2-7,19-22
# ncu of the staged MXFP8 W13 at qwen3_30b T = 512 (the narrow 128x128 tile, split: 13.7 us a tile
# for 16 k blocks, far above its tensor and fold work; G99's outcome): which wait holds it.
if [ "$(left)" -gt 130 ]; then
  reasons=""; for r in barrier long_scoreboard wait math_pipe_throttle membar sleeping mio_throttle short_scoreboard selected no_instructions lg_throttle; do reasons+="${reasons:+,}smsp__pcsamp_warps_issue_stalled_$r"; done
  timeout 70 ncu --kernel-name-base demangled -k "regex:sm90_grouped_gemm.*Mxfp8" -s 3 -c 1 --section SpeedOfLight \
    --section WarpStateStats --section MemoryWorkloadAnalysis --section SourceCounters --metrics "$reasons" -o $L/ncu_mxfp8_w13_t512 \
    build-gpu/bench/bench_grouped_gemm --shapes qwen3_30b --ep 1 --tokens 512 --routing random --ops w13_fprop_mxfp8 \
    --iters 3 --rounds 1 > $L/ncu_mxfp8_w13_t512.txt 2>&1
  echo "ncu mxfp8 w13 T512 rc=$? at $((SECONDS-T0)) s"
  timeout 30 ncu --import $L/ncu_mxfp8_w13_t512.ncu-rep --page details > $L/details_mxfp8_w13_t512.txt 2>&1
  timeout 40 ncu --import $L/ncu_mxfp8_w13_t512.ncu-rep --page source --csv --print-source sass > $L/source_mxfp8_w13_t512.csv 2>&1
  grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Warp Cycles Per Issued|Stall" $L/details_mxfp8_w13_t512.txt | head -12
fi
for fmt in mxfp8; do  # (FP8 blockwise's table is s30 / s35's, its kernels unchanged since)
  [ "$(left)" -gt 120 ] || { echo "skip table $fmt"; continue; }
  timeout 110 build-gpu/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral,dsv3_prefill --routing balanced \
    --rounds 1 --sustain-ms 50 --ops w13_fprop_$fmt,w2_fprop_$fmt,w13_dgrad_$fmt,w2_dgrad_$fmt > $L/gemm_table_$fmt.log 2>&1
  echo "gemm table $fmt rc=$? at $((SECONDS-T0)) s:"
  grep -E "^fp8 .*\(pick\)|targets met" $L/gemm_table_$fmt.log | sed -E "s/ +/ /g" | cut -c1-170
done
[ "$(left)" -gt 200 ] || exit 0  # four profiled processes, each with three imports
NCU_STEP_S=$(( ($(left) - 160) / 4 )) OUT=$L/ncu bash docs/gpu_runs/2026-12-05-s43/scripts/next_ncu_mega_unrun.sh 2>&1 | tail -40
