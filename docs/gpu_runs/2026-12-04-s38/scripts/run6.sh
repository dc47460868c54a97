#!/usr/bin/env bash
# s38 r6: the final tree -- every MXFP8 GPU test and the MXFP8 suite after the A-scale stride helper
# (one formula for the scale warps and the swap-AB decode scales; behaviour unchanged) -- and, for
# issue #28, the staged inference layers' stage tables at qwen3_30b dims with decode-sized batches
# (G62 / G80 measured only dsv3 dims, where the weight streams are 96% of the layer).
O=${OUT:-/tmp/o}; L=/tmp/s38r6; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && cmake --build build-gpu -j 16 ) > $L/build.log 2>&1
for b in dist-moe tests/dist_moe_gpu_tests dmoe_launch; do
  [ -x build-gpu/$b ] || { echo "missing $b"; tail -30 $L/build.log; exit 1; }; done
echo "build done at $((SECONDS-T0)) s"
timeout 120 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='*Mxfp8*' > $L/mxfp8_tests.log 2>&1
echo "mxfp8 gpu tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $L/mxfp8_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $L/mxfp8_tests.log | head -10
timeout 60 build-gpu/dmoe_launch -n 1 --timeout 55 -- build-gpu/tests/dist_moe_mxfp8_pipeline_tests > $L/suite_mxfp8.log 2>&1
echo "mxfp8 suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_mxfp8.log | head -1)"
for spec in "mxfp8 128" "mxfp8 512" "nvfp4 128" "nvfp4 512"; do
  set -- $spec
  f=$L/layer_qwen3_$1_T$2.log
  timeout 60 build-gpu/dist-moe bench --shape qwen3_30b --tokens $2 --mode infer --format $1 --no-baseline --iters 20 \
    --sustain-ms 50 > $f 2>&1
  echo "layer qwen3 dims T=$2 $1 rc=$?: $(grep -E '^inference forward' $f | awk '{print $3}') ms; $(grep -E '^BF16 layer inference' $f | awk '{print $4, $5}')"
  sed -n '/^stage/,/^$/p' $f
done
