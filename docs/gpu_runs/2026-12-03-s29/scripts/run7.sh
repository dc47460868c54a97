#!/usr/bin/env bash
# s29 r7: the final tree (--preheat self the default): the FP8-blockwise training layer at qwen3_30b
# without the flag, and the block-scaled inference layers at the prefill shapes and decode under
# their own load (the inference table's rows were measured under the BF16 GEMM load).
O=${OUT:-/tmp/o}; L=/tmp/s29r7; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target dist-moe dmoe_launch >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
B() {  # tag, then dist-moe bench arguments
  local tag=$1; shift
  timeout 200 build-gpu/dist-moe bench --no-baseline "$@" > $L/layer_$tag.log 2>&1
  echo "$tag rc=$? at $((SECONDS-T0)) s: $(grep -E 'sustained|^forward\+backward|^inference|BF16 layer (forward\+backward|inference)' $L/layer_$tag.log | sed 's/.*each measurement/each measurement/' | tr -s ' ' | tr '\n' '|')"
}
B qwen3_fp8bw_train --shape qwen3_30b --format fp8_blockwise --iters 5 --sustain-ms 100
B qwen3_fp8bw_infer --shape qwen3_30b --mode infer --format fp8_blockwise --iters 10 --sustain-ms 100
B qwen3_mxfp8_infer --shape qwen3_30b --mode infer --format mxfp8 --iters 10 --sustain-ms 100
B mixtral_fp8bw_infer --shape mixtral --mode infer --format fp8_blockwise --iters 10 --sustain-ms 100
B mixtral_mxfp8_infer --shape mixtral --mode infer --format mxfp8 --iters 10 --sustain-ms 100
B decode_mxfp8 --shape dsv3_decode --mode infer --format mxfp8 --iters 10 --sustain-ms 100
B decode_fp8bw --shape dsv3_decode --mode infer --format fp8_blockwise --iters 10 --sustain-ms 100
