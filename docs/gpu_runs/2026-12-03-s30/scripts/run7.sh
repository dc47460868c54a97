#!/usr/bin/env bash
# s30 r7, the final tree: the FP8-blockwise 128x256 FPROP / DGRAD as two 128-column SS slices with
# 240 consumer registers and two B scales per tile (G66). Correctness: the FP8 and MXFP8 grouped
# GEMM tests (every compiled configuration), the FP8-blockwise training and inference
# suites, the MXFP8 training suite (its mainloop derives from the FP8 one). Speed: the GEMM bench at
# EP2 sizes, the training and inference layers at qwen3_30b and mixtral.
O=${OUT:-/tmp/o}; L=/tmp/s30r7; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target dist_moe_gpu_tests bench_grouped_gemm dist-moe dmoe_launch \
    dist_moe_fp8_blockwise_training_tests dist_moe_fp8_blockwise_pipeline_tests dist_moe_mxfp8_pipeline_tests >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmFp8*:GroupedGemmMxfp8*' > $L/gemm_tests.log 2>&1
echo "GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $L/gemm_tests.log | tr '\n' ' ')"
for suite in fp8_blockwise_training fp8_blockwise_pipeline mxfp8_pipeline; do
  timeout 120 build-gpu/dmoe_launch -n 1 --timeout 110 -- build-gpu/tests/dist_moe_${suite}_tests > $L/$suite.log 2>&1
  echo "$suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/$suite.log | head -3 | tr '\n' ' ')"
done
timeout 60 build-gpu/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral --routing balanced --rounds 1 --sustain-ms 100 \
  --ops w13_fprop_fp8,w2_fprop_fp8,w2_dgrad_fp8 > $L/gemm_bench.log 2>&1
echo "GEMM bench rc=$?"; grep '(pick)' $L/gemm_bench.log | awk '{print $2, $4, $7, $9, $12, $16}'
for s in qwen3_30b mixtral; do for m in train infer; do
  timeout 60 build-gpu/dist-moe bench --shape $s --mode $m --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_${s}_$m.log 2>&1
  echo "layer $s $m rc=$?: $(grep -E '^forward\+backward|^inference|^forward |BF16 layer|fwd:w13|fwd:w2 |bwd:w2_dgrad|bwd:w13_dgrad' $L/layer_${s}_$m.log | tr -s ' ' | tr '\n' '|')"
done; done
