#!/usr/bin/env bash
# s28 r5: the final tree of the quantizer round (region_tile_cost picks, FP8-blockwise weight bands,
# NVFP4 expansion sharing its loads by shuffles, the column dequantizer on three stages): Quantize*
# and Nvfp4ExpandRows GPU tests, bench_quantize twice, the MXFP8 / NVFP4 / FP8-blockwise pipeline
# suites and the block-scaled torch tests.
O=${OUT:-/tmp/o}; L=/tmp/s28r5; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
OUT=$L/chk DMOE_STAGES="build" scripts/gpu_check.sh > $L/chk.txt 2>&1; tail -3 $L/chk.txt
echo "build done at $((SECONDS-T0)) s"
timeout 300 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Quantize*:Nvfp4ExpandRows*' > $L/tests.log 2>&1
echo "tests rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED' $L/tests.log | tr '\n' ' ') at $((SECONDS-T0)) s"
B=build-gpu/bench/bench_quantize
timeout 200 $B > $L/bench1.log 2>&1; echo "bench 1 rc=$? at $((SECONDS-T0)) s"
timeout 200 $B > $L/bench2.log 2>&1; echo "bench 2 rc=$? at $((SECONDS-T0)) s"
OUT=$L/st DMOE_STAGES="mxfp8 nvfp4 fp8bw torch" TORCH_TESTS="tests/torch/test_nvfp4.py tests/torch/test_mxfp8.py" \
  TORCH_EXAMPLES="block_scaled_inference" scripts/gpu_check.sh > $L/st.txt 2>&1
grep -E "pipeline tests|trap tests|pytest|example|install|FAIL" $L/st.txt | tail -12
echo "suites done at $((SECONDS-T0)) s"
paste <(tail -30 $L/bench1.log | awk '{print $1, $2, $NF=="below"?$(NF-1):$NF}') <(tail -30 $L/bench2.log | awk '{print $NF=="below"?$(NF-1):$NF}')
