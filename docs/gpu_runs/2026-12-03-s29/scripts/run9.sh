#!/usr/bin/env bash
# s29 r9: the FP8-blockwise 128x256 FPROP tile with eight 32-column slices over two scratch sets
# (pipelined: a slice folded while the next runs) and two B scales per k block: the FP8 and MXFP8
# GEMM tests, the GEMM bench at the layer's EP1 sizes (against r1-r2: W13 FP8 1.31-1.38x our BF16
# GEMM), the training layer, then the FP8-blockwise training suite.
O=${OUT:-/tmp/o}; L=/tmp/s29r9; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target dist_moe_gpu_tests bench_grouped_gemm dist-moe dmoe_launch dist_moe_fp8_blockwise_training_tests >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 120 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmFp8*:GroupedGemmMxfp8*' > $L/gemm_tests.log 2>&1
echo "GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $L/gemm_tests.log | tr '\n' ' ')"
timeout 90 build-gpu/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b,mixtral --routing balanced --rounds 1 --sustain-ms 100 \
  --ops w13_fprop_fp8,w2_fprop_fp8,w2_dgrad_fp8 > $L/gemm_bench.log 2>&1
echo "GEMM bench rc=$? at $((SECONDS-T0)) s"; grep "(pick)" $L/gemm_bench.log | awk '{print $2, $4, $6, $7, $10, $11, $13, $14}'
for s in qwen3_30b mixtral; do
  timeout 60 build-gpu/dist-moe bench --shape $s --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_$s.log 2>&1
  echo "layer $s rc=$?: $(grep -E '^forward\+backward|BF16 layer forward\+backward|fwd:w13|fwd:w2 |bwd:w2_dgrad|bwd:w13_dgrad' $L/layer_$s.log | tr -s ' ' | tr '\n' '|')"
done
timeout 110 build-gpu/dmoe_launch -n 1 --timeout 100 -- build-gpu/tests/dist_moe_fp8_blockwise_training_tests > $L/fp8bw_train.log 2>&1
echo "fp8bw training suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/fp8bw_train.log | head -4 | tr '\n' ' ')"
