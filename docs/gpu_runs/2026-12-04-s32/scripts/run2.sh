#!/usr/bin/env bash
# s32 r2: the fused dxy kernel with regions chosen for one CTA per SM (as large as the waves allow)
# and an L2 prefetch of the next tile's rows. A/B: a sed'd copy without the prefetch (build-nopf),
# alternated with the tree in bench_quantize; the tree's fused kernel at every region shape
# (qwen3_30b). Then the tests (fused kernel, every region shape), the FP8-blockwise and MXFP8
# suites, the torch FP8-blockwise and MXFP8 tests, and the training layers.
O=${OUT:-/tmp/o}; L=/tmp/s32r2; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
mkdir -p /tmp/nopf && tar -cf - --exclude='./build*' . | tar -xf - -C /tmp/nopf
sed -i 's/^    if (t + 1 < tiles)$/    if (false \&\& t + 1 < tiles)/' /tmp/nopf/src/quant/quantize_swiglu_backward.cu
grep -c 'if (false && t + 1 < tiles)' /tmp/nopf/src/quant/quantize_swiglu_backward.cu > $L/nopf_sed.txt
cfg() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" -DDIST_MOE_NCCL_ROOT=$NCCL; }
( cfg . build-gpu && cmake --build build-gpu -j 11 --target dist_moe_gpu_tests dist-moe dmoe_launch bench_quantize \
    dist_moe_fp8_blockwise_training_tests dist_moe_mxfp8_pipeline_tests dist_moe_native dist_moe_torch ) > $L/build.log 2>&1 &
( cfg /tmp/nopf /tmp/nopf/build-nopf && cmake --build /tmp/nopf/build-nopf -j 5 --target bench_quantize ) > $L/build_nopf.log 2>&1 &
wait
ln -sfn /tmp/nopf/build-nopf build-nopf
[ -x build-gpu/dist-moe ] && [ -x build-nopf/bench/bench_quantize ] || { tail -20 $L/build.log $L/build_nopf.log; exit 1; }
echo "build done at $((SECONDS-T0)) s (nopf sed: $(cat $L/nopf_sed.txt))"
timeout 100 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='SwigluBackwardQuantize*' > $L/fused_tests.log 2>&1
echo "fused tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|Failure' $L/fused_tests.log | head -6 | tr '\n' ' ')"
for s in qwen3_30b mixtral dsv3_prefill; do for v in gpu nopf gpu nopf; do
  timeout 60 build-$v/bench/bench_quantize --shapes $s --ep 2 --iters 10 --sustain-ms 30 > $L/bq_${s}_$v.log 2>&1
  cp $L/bq_${s}_$v.log $L/bq_${s}_${v}_$SECONDS.log
  echo "$s $v: $(grep -E '^(mxfp8|fp8bw)_fused |fused x two' $L/bq_${s}_$v.log | tr -s ' ' | tr '\n' '|')"
done; done
timeout 100 build-gpu/bench/bench_quantize --shapes qwen3_30b --ep 2 --iters 10 --sustain-ms 30 --regions > $L/bq_regions.log 2>&1
grep -A12 "fp8bw_fused by region" $L/bq_regions.log
grep -E "of [0-9]+ quantizers" $L/bq_qwen3_30b_gpu.log
timeout 100 build-gpu/dmoe_launch -n 1 --timeout 90 -- build-gpu/tests/dist_moe_fp8_blockwise_training_tests > $L/fp8_training.log 2>&1
echo "fp8_blockwise_training rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/fp8_training.log | head -2 | tr '\n' ' ')"
timeout 100 build-gpu/dmoe_launch -n 1 --timeout 90 -- build-gpu/tests/dist_moe_mxfp8_pipeline_tests > $L/mxfp8.log 2>&1
echo "mxfp8_pipeline rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/mxfp8.log | head -2 | tr '\n' ' ')"
for f in fp8_blockwise mxfp8; do for s in qwen3_30b mixtral; do
  timeout 60 build-gpu/dist-moe bench --shape $s --format $f --no-baseline --iters 5 --sustain-ms 100 > $L/layer_${f}_${s}.log 2>&1
  echo "layer $f $s rc=$?: $(grep -E '^forward\+backward|BF16 layer forward\+backward|swiglu_backward' $L/layer_${f}_${s}.log | tr -s ' ' | tr '\n' '|')"
done; done
PYTHONPATH=$PWD/python timeout 150 python3 -m pytest -q tests/torch/test_fp8_blockwise.py tests/torch/test_mxfp8.py > $L/torch.log 2>&1
echo "torch fp8_blockwise + mxfp8 rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch.log)"
