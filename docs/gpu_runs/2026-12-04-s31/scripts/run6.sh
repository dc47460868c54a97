#!/usr/bin/env bash
# s31 r6, the final tree (G69's 128x256 WGRAD picked): correctness -- the FP8 and MXFP8 grouped GEMM
# tests, the FP8-blockwise training and inference suites, the MXFP8 suite, the FP8-blockwise torch
# tests; speed -- the training layers at qwen3_30b, mixtral and dsv3_prefill with 128 experts. A/B:
# the 128x256 WGRAD's BF16 epilogue deferring no chunk (a sed'd copy of the tree, build-d0) against
# one (the tree), alternated at qwen3_30b and mixtral.
O=${OUT:-/tmp/o}; L=/tmp/s31r6; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
mkdir -p /tmp/d0src && tar -cf - --exclude='./build*' . | tar -xf - -C /tmp/d0src
sed -i 's/kDeferChunks = Mainloop::kWideConsumers ? 1 :/kDeferChunks = Mainloop::kWideConsumers ? 0 :/' /tmp/d0src/include/dist_moe/device/gemm/epilogue_store.cuh
grep -c 'kWideConsumers ? 0 :' /tmp/d0src/include/dist_moe/device/gemm/epilogue_store.cuh > $L/d0_sed.txt
cfg() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" -DDIST_MOE_NCCL_ROOT=$NCCL; }
( cfg . build-gpu && cmake --build build-gpu -j 11 --target dist_moe_gpu_tests dist-moe dmoe_launch \
    dist_moe_fp8_blockwise_training_tests dist_moe_fp8_blockwise_pipeline_tests dist_moe_mxfp8_pipeline_tests \
    dist_moe_native dist_moe_torch ) > $L/build.log 2>&1 &
( cfg /tmp/d0src /tmp/d0src/build-d0 && cmake --build /tmp/d0src/build-d0 -j 5 --target dist-moe dmoe_launch ) > $L/build_d0.log 2>&1 &
wait
ln -sfn /tmp/d0src/build-d0 build-d0
[ -x build-gpu/dist-moe ] && [ -x build-d0/dist-moe ] || { tail -20 $L/build.log $L/build_d0.log; exit 1; }
echo "build done at $((SECONDS-T0)) s (d0 sed: $(cat $L/d0_sed.txt))"
timeout 200 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmFp8*:GroupedGemmMxfp8*' > $L/gemm_tests.log 2>&1
echo "GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $L/gemm_tests.log | tr '\n' ' ')"
for suite in fp8_blockwise_training fp8_blockwise_pipeline mxfp8_pipeline; do
  timeout 120 build-gpu/dmoe_launch -n 1 --timeout 110 -- build-gpu/tests/dist_moe_${suite}_tests > $L/$suite.log 2>&1
  echo "$suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/$suite.log | head -3 | tr '\n' ' ')"
done
PYTHONPATH=$PWD/python timeout 200 python3 -m pytest -q tests/torch/test_fp8_blockwise.py > $L/torch_fp8.log 2>&1
echo "torch fp8 rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch_fp8.log)"
for s in qwen3_30b mixtral; do for v in gpu d0 gpu d0; do
  timeout 60 build-$v/dist-moe bench --shape $s --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_${s}_$v.log 2>&1
  echo "layer $s $v rc=$?: $(grep -E '^forward  |^forward\+backward|BF16 layer forward|wgrad' $L/layer_${s}_$v.log | tr -s ' ' | tr '\n' '|')"
done; done
timeout 120 build-gpu/dist-moe bench --shape dsv3_prefill --experts 128 --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_dsv3_128.log 2>&1
echo "layer dsv3_prefill 128 experts rc=$?: $(grep -E '^forward  |^forward\+backward|BF16 layer forward|wgrad|dgrad|fwd:w' $L/layer_dsv3_128.log | tr -s ' ' | tr '\n' '|')"
