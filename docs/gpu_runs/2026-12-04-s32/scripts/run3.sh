#!/usr/bin/env bash
# s32 r3, the final tree (r2's finding applied: no L2 prefetch, which made the fused kernel 10-15%
# slower): the quantizer tests (the rows + columns kernel's shared tile body, the fused kernel at
# every region shape), the FP8-blockwise training / inference and MXFP8 suites, the torch
# FP8-blockwise and MXFP8 tests, bench_quantize (every quantizer; the fused kernel by region at
# qwen3_30b), then the training layers against our BF16 layer.
O=${OUT:-/tmp/o}; L=/tmp/s32r3; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target dist_moe_gpu_tests dist-moe dmoe_launch bench_quantize dist_moe_native dist_moe_torch \
    dist_moe_fp8_blockwise_training_tests dist_moe_fp8_blockwise_pipeline_tests dist_moe_mxfp8_pipeline_tests >> $L/build.log 2>&1 \
  || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='SwigluBackwardQuantize*:Quantize*' > $L/quant_tests.log 2>&1
echo "quantizer tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|Failure' $L/quant_tests.log | head -6 | tr '\n' ' ')"
for t in fp8_blockwise_training fp8_blockwise_pipeline mxfp8_pipeline; do
  timeout 150 build-gpu/dmoe_launch -n 1 --timeout 140 -- build-gpu/tests/dist_moe_${t}_tests > $L/$t.log 2>&1
  echo "$t rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/$t.log | head -2 | tr '\n' ' ')"
done
PYTHONPATH=$PWD/python timeout 150 python3 -m pytest -q tests/torch/test_fp8_blockwise.py tests/torch/test_mxfp8.py > $L/torch.log 2>&1
echo "torch fp8_blockwise + mxfp8 rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/torch.log)"
timeout 150 build-gpu/bench/bench_quantize --shapes qwen3_30b,mixtral,dsv3_prefill --ep 2 --iters 10 --sustain-ms 30 > $L/bench_quantize.log 2>&1
echo "bench_quantize rc=$? at $((SECONDS-T0)) s"
grep -E "dxy \(|_fused |_two_passes|swiglu_bwd_bf16|of [0-9]+ quantizers|dxy: " $L/bench_quantize.log
timeout 60 build-gpu/bench/bench_quantize --shapes qwen3_30b --ep 2 --iters 10 --sustain-ms 30 --regions > $L/bq_regions.log 2>&1
grep -A12 "fp8bw_fused by region" $L/bq_regions.log
for f in fp8_blockwise mxfp8; do for s in qwen3_30b mixtral qwen3_30b mixtral; do
  timeout 60 build-gpu/dist-moe bench --shape $s --format $f --no-baseline --iters 5 --sustain-ms 100 > $L/layer_${f}_${s}.log 2>&1
  cp $L/layer_${f}_${s}.log $L/layer_${f}_${s}_$SECONDS.log
  echo "layer $f $s rc=$?: $(grep -E '^forward\+backward|BF16 layer forward\+backward|swiglu_backward' $L/layer_${f}_${s}.log | tr -s ' ' | tr '\n' '|')"
done; done
timeout 120 build-gpu/dist-moe bench --shape dsv3_prefill --experts 128 --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_dsv3_128.log 2>&1
echo "layer fp8_blockwise dsv3_prefill 128 experts rc=$?: $(grep -E '^forward\+backward|BF16 layer forward\+backward|swiglu_backward' $L/layer_dsv3_128.log | tr -s ' ' | tr '\n' '|')"
