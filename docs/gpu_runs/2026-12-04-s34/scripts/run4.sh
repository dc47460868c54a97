#!/usr/bin/env bash
# s34 r4: G76 -- the rows + columns quantizer as one wave of persistent CTAs (the tree) against the
# tree without it (A: g76_persistent_quantizer.patch reversed). B: the quantizer GPU tests, the
# FP8-blockwise training and MXFP8 suites; bench_quantize A/B alternated; the training layers A/B.
O=${OUT:-/tmp/o}; L=/tmp/s34r4; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
R=docs/gpu_runs/2026-12-04-s34
newest() { ls -t $L/$1_*.log | head -1; }
mkdir -p /tmp/A && tar -cf - --exclude='./build*' . | tar -xf - -C /tmp/A
(cd /tmp/A && patch -R -p1 < $OLDPWD/$R/g76_persistent_quantizer.patch) > $L/patch_A.log 2>&1
echo "A: $(grep -c 'ry += gridDim.y' /tmp/A/src/quant/quantize_activations.cu) persistent loops (0 expected)"
cfg() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" -DDIST_MOE_NCCL_ROOT=$NCCL; }
( cfg . build-gpu && cmake --build build-gpu -j 11 --target dist_moe_gpu_tests dist-moe dmoe_launch bench_quantize \
    dist_moe_fp8_blockwise_training_tests dist_moe_mxfp8_pipeline_tests ) > $L/build.log 2>&1 &
( cfg /tmp/A /tmp/A/build-A && cmake --build /tmp/A/build-A -j 5 --target dist-moe dmoe_launch bench_quantize ) > $L/build_A.log 2>&1 &
wait
ln -sfn /tmp/A/build-A build-A; ln -sfn build-gpu build-B
for b in build-B/dist-moe build-A/dist-moe build-B/bench/bench_quantize build-A/bench/bench_quantize; do
  [ -x $b ] || { echo "missing $b"; tail -30 $L/build*.log; exit 1; }; done
echo "build done at $((SECONDS-T0)) s"
timeout 150 build-B/tests/dist_moe_gpu_tests --gtest_filter='Quantize*' > $L/quantize_tests.log 2>&1
echo "Quantize* tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|Failure' $L/quantize_tests.log | head -6 | tr '\n' ' ')"
for t in fp8_blockwise_training mxfp8_pipeline; do
  timeout 170 build-B/dmoe_launch -n 1 --timeout 160 -- build-B/tests/dist_moe_${t}_tests > $L/suite_$t.log 2>&1
  echo "$t rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_$t.log | head -2 | tr '\n' ' ')"
done
for v in A B A B; do
  timeout 120 build-$v/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b > $L/bq_${v}_$SECONDS.log 2>&1
  echo "bench_quantize $v rc=$?: $(grep -E '^(mxfp8|fp8bw)_rows_cols' $(newest bq_$v) | tr -s ' ' | cut -c1-150 | tr '\n' '|')"
done
sel='quantize_x|quantize_h2|quantize_grad_h3|^forward\+backward|BF16 layer forward\+backward'
layer() {  # arm shape format [extra]
  timeout 90 build-$1/dist-moe bench --shape $2 --format $3 --no-baseline --iters 5 --sustain-ms 100 $4 > $L/layer_$2_$3_$1_$SECONDS.log 2>&1
  echo "layer $2 $3 $1 rc=$?: $(grep -hE "$sel" $(newest layer_$2_$3_$1) | tr -s ' ' | tr '\n' '|')"
}
for i in 1 2; do for v in A B; do layer $v qwen3_30b fp8_blockwise; done; done
for v in A B; do layer $v dsv3_prefill fp8_blockwise "--experts 128"; done
for v in A B; do layer $v qwen3_30b mxfp8; done
