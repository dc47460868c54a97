#!/usr/bin/env bash
# s42 r2 (the build of r1 kept on the machine): the torch package's Mega tests, then Mega against the
# staged layer, alternated in each run: MXFP8 training at qwen3_30b (the forward's rows form and the
# fused W2 DGRAD + SwiGLU backward: stage table), MXFP8 inference at qwen3_30b T = 128 / 512 / 1024,
# MXFP8 and NVFP4 at dsv3_decode.
O=${OUT:-/tmp/o}; L=/tmp/s42r2; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 DMOE_EXPERIMENTAL_MEGA=1
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
left() { echo $((540 - (SECONDS - T0))); }
( cmake --build build-gpu -j 16 ) > $L/build.log 2>&1 || { echo "build failed"; tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
PYTHONPATH=$PWD/python timeout 150 python3 -m pytest -q tests/torch/test_mega.py > $L/torch_mega.log 2>&1
echo "torch mega rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch_mega.log)"
grep -E "^FAILED|Error" $L/torch_mega.log | head -8
bench() {  # name shape mode format [tokens]
  local f=$L/layer_$1.log tok=()
  [ -n "${5:-}" ] && tok=(--tokens "$5")
  [ "$(left)" -gt 60 ] || { echo "skip $1"; return; }
  timeout 120 build-gpu/dist-moe bench --shape "$2" "${tok[@]}" --mode "$3" --format "$4" --no-baseline --iters 10 \
    --sustain-ms 50 --pipeline mega > $f 2>&1
  echo "$1 rc=$? at $((SECONDS-T0)) s:"
  grep -E "^(forward|inference|staged layer|BF16 layer)" $f | head -6
}
bench qwen3_train qwen3_30b train mxfp8
grep -E "mega|w2_dgrad|swiglu_backward|quantize_h2|fwd:w13|fwd:w2 " $L/layer_qwen3_train.log | head -12
bench qwen3_t128_mxfp8 qwen3_30b infer mxfp8 128
bench qwen3_t512_mxfp8 qwen3_30b infer mxfp8 512
bench qwen3_t1024_mxfp8 qwen3_30b infer mxfp8 1024
bench dsv3_decode_mxfp8 dsv3_decode infer mxfp8
bench dsv3_decode_nvfp4 dsv3_decode infer nvfp4
bench qwen3_t128_nvfp4 qwen3_30b infer nvfp4 128
