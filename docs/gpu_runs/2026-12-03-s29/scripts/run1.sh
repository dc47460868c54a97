#!/usr/bin/env bash
# s29 r1: confirm s28's final tree (quantizer + NVFP4 suites, the 8-stage expansion's tests), then a
# fresh baseline for issue #27: the FP8-blockwise training layer's stage tables at qwen3_30b and
# mixtral, and the FP8 GEMMs at the layer's EP1 sizes against our BF16 GEMMs (interleaved).
O=${OUT:-/tmp/o}; L=/tmp/s29r1; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
OUT=$L/chk DMOE_STAGES="build quant nvfp4" scripts/gpu_check.sh > $L/chk.log 2>&1
echo "gpu_check rc=$? at $((SECONDS-T0)) s"; tail -12 $L/chk.log
timeout 120 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Nvfp4ExpandRows*' > $L/expand_tests.log 2>&1
echo "expand tests rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED' $L/expand_tests.log | tr '\n' ' ')"
for s in qwen3_30b mixtral; do
  timeout 150 build-gpu/dist-moe bench --shape $s --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 50 > $L/layer_$s.log 2>&1
  echo "layer $s rc=$?"; grep -E "^forward|BF16 layer" $L/layer_$s.log
done
timeout 240 build-gpu/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b,mixtral --routing balanced --rounds 2 --sustain-ms 100 \
  --ops w13_fprop_fp8,w2_fprop_fp8,w13_dgrad_fp8,w2_dgrad_fp8,w13_wgrad_fp8,w2_wgrad_fp8 > $L/gemm_ep1.log 2>&1
echo "gemm ep1 rc=$? at $((SECONDS-T0)) s"; tail -30 $L/gemm_ep1.log
