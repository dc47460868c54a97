#!/usr/bin/env bash
# Session 25 run 2: the coalesced NVFP4 row expansion.
O=${OUT:-/tmp/o}; mkdir -p $O
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
OUT=$O/chk DMOE_STAGES="build" scripts/gpu_check.sh > $O/chk.txt 2>&1; tail -1 $O/chk.txt
build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmNvfp4*:Nvfp4ExpandRows*' > $O/gemm_tests.log 2>&1
grep -E "nvfp4_expand_rows|FAILED|PASSED" $O/gemm_tests.log | tail -8
build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --ep 1 > $O/bench_quantize.log 2>&1; grep -E "expand|quantizers at" $O/bench_quantize.log
for s in dsv3_prefill qwen3_30b dsv3_decode; do
  timeout 120 build-gpu/dist-moe bench --shape $s --format nvfp4 --mode infer --no-baseline --iters 10 --sustain-ms 50 > $O/bench_$s.log 2>&1
  echo "== $s"; grep -E "expand|fwd:w13 |fwd:w2 |inference forward|BF16 layer" $O/bench_$s.log | head -12
done
OUT=$O/st DMOE_STAGES="nvfp4" scripts/gpu_check.sh > $O/st.txt 2>&1
grep -E "pipeline tests|trap tests" $O/st.txt | tail -2
ncu --kernel-name-base demangled -k "regex:Nvfp4SwapAB.*" -c 4 --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy build-gpu/dist-moe bench-rank --shape dsv3_decode --format nvfp4 --mode infer --iters 2 > $O/ncu_decode.txt 2>&1
grep -E "Nvfp4SwapAB|Duration|Compute \(SM\) Th|Memory Through|DRAM Through|Stall|Registers|Warp Cycles Per Issued" $O/ncu_decode.txt | head -40
