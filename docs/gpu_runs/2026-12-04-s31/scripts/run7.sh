#!/usr/bin/env bash
# s31 r7, the final tree (r6's finding applied: the 128x256 FP8 WGRAD's BF16 epilogue not deferred):
# the FP8 WGRAD GEMM tests and the FP8-blockwise training suite, then the training layers at
# qwen3_30b and mixtral (twice) and dsv3_prefill with 128 experts.
O=${OUT:-/tmp/o}; L=/tmp/s31r7; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target dist_moe_gpu_tests dist-moe dmoe_launch dist_moe_fp8_blockwise_training_tests >> $L/build.log 2>&1 \
  || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmFp8*' > $L/gemm_tests.log 2>&1
echo "GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $L/gemm_tests.log | tr '\n' ' ')"
timeout 120 build-gpu/dmoe_launch -n 1 --timeout 110 -- build-gpu/tests/dist_moe_fp8_blockwise_training_tests > $L/training.log 2>&1
echo "training suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/training.log | head -3 | tr '\n' ' ')"
for s in qwen3_30b mixtral qwen3_30b mixtral; do
  timeout 60 build-gpu/dist-moe bench --shape $s --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_${s}.log 2>&1
  echo "layer $s rc=$?: $(grep -E '^forward  |^forward\+backward|BF16 layer forward|wgrad' $L/layer_${s}.log | tr -s ' ' | tr '\n' '|')"
  cp $L/layer_${s}.log $L/layer_${s}_$SECONDS.log
done
timeout 120 build-gpu/dist-moe bench --shape dsv3_prefill --experts 128 --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_dsv3_128.log 2>&1
echo "layer dsv3_prefill 128 experts rc=$?: $(grep -E '^forward  |^forward\+backward|BF16 layer forward|wgrad' $L/layer_dsv3_128.log | tr -s ' ' | tr '\n' '|')"
