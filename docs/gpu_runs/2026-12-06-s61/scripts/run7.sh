#!/usr/bin/env bash
# s61 r7: s58 r9 again on HEAD (G126 + G128: 622 loop instructions per stage against 801) -- ncu source pages
# (stall samples by CUDA line) of the W2 decode GEMM on expanded rows (the layer's decode path): at
# qwen3_30b T = 128 (K = 768: three stages per tile, the boundary weighs most) and at dsv3_decode
# (eight stages per tile). Measurement only, for the plan of G131 (where the W2 tile boundary goes now).
RUN_NAME=s61r7; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh bench_grouped_gemm || exit 1
echo "built at $((SECONDS-T0)) s"
B=build-gpu/bench/bench_grouped_gemm
for shape in qwen3_30b dsv3_decode; do
  extra=""; [ $shape = qwen3_30b ] && extra="--tokens 128"
  tag=w2_$shape
  timeout 120 ncu --clock-control none --kernel-name-base demangled -k "regex:Nvfp4SwapAB" --launch-skip 3 -c 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
    --section LaunchStats -o $L/$tag $B --ep 1 --shapes $shape $extra --routing balanced --ops w2_fprop_nvfp4x \
    --iters 4 --sustain-ms 0 > $L/${tag}_run.txt 2>&1
  echo "ncu $tag rc=$? at $((SECONDS-T0)) s"
  ncu_pages $tag 40
  grep -E "SM Frequency|Duration|Issue Slots Busy|Warp Cycles Per Issued|Eligible Warps|DRAM Th|Grid Size" $L/ncu_${tag}_details.txt | head -8
  head -25 $L/ncu_${tag}_by_line.txt
done
