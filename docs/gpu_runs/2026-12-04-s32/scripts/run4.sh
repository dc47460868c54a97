#!/usr/bin/env bash
# s32 r4: the FP8-blockwise WGRAD reads the saved compact x / h2 column bundles where the forward
# left them (tensor map row length and stride patched on the device to R, the routed rows; scales
# after the data) instead of expanding them first. Tests: the FP8 WGRAD GEMM tests (each runs the
# compact x bundle against the strided one, bit for bit), every device-offset GEMM test (the map
# patching is shared), the BF16 and FP8-blockwise training suites, the torch FP8-blockwise tests;
# then the training layers (stage table: the expansions are gone; the WGRAD stages against r3's).
O=${OUT:-/tmp/o}; L=/tmp/s32r4; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target dist_moe_gpu_tests dist-moe dmoe_launch dist_moe_native dist_moe_torch \
    dist_moe_fp8_blockwise_training_tests dist_moe_pipeline_tests >> $L/build.log 2>&1 \
  || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 200 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmFp8Wgrad*:GroupedGemmOffsets*' > $L/gemm_tests.log 2>&1
echo "GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|Failure' $L/gemm_tests.log | head -6 | tr '\n' ' ')"
grep -c "compact x bundle" $L/gemm_tests.log
for t in fp8_blockwise_training pipeline; do
  timeout 150 build-gpu/dmoe_launch -n 1 --timeout 140 -- build-gpu/tests/dist_moe_${t}_tests > $L/$t.log 2>&1
  echo "$t rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/$t.log | head -2 | tr '\n' ' ')"
done
PYTHONPATH=$PWD/python timeout 120 python3 -m pytest -q tests/torch/test_fp8_blockwise.py > $L/torch.log 2>&1
echo "torch fp8_blockwise rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch.log)"
for s in qwen3_30b mixtral qwen3_30b mixtral; do
  timeout 60 build-gpu/dist-moe bench --shape $s --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_$s.log 2>&1
  cp $L/layer_$s.log $L/layer_${s}_$SECONDS.log
  echo "layer $s rc=$?: $(grep -E '^forward\+backward|BF16 layer forward\+backward|wgrad|expand' $L/layer_$s.log | tr -s ' ' | tr '\n' '|')"
done
timeout 120 build-gpu/dist-moe bench --shape dsv3_prefill --experts 128 --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_dsv3_128.log 2>&1
echo "layer dsv3_prefill 128 experts rc=$?: $(grep -E '^forward\+backward|BF16 layer forward\+backward|wgrad|expand' $L/layer_dsv3_128.log | tr -s ' ' | tr '\n' '|')"
