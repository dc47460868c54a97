#!/usr/bin/env bash
# s30 r2: the FP8-blockwise 128x256 FPROP / DGRAD with the second consumer warpgroup starting each
# tile after the first one's first slice (G66). Correctness (FP8 GEMM tests, FP8-blockwise training
# suite), then A/B by DMOE_FP8_CONSUMER_OFFSET=0|1 alternated: GEMM bench at EP2 and EP1 sizes, and
# the training layer at qwen3_30b and mixtral.
O=${OUT:-/tmp/o}; L=/tmp/s30r2; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target dist_moe_gpu_tests bench_grouped_gemm dist-moe dmoe_launch dist_moe_fp8_blockwise_training_tests >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 120 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmFp8*:GroupedGemmMxfp8*' > $L/gemm_tests.log 2>&1
echo "GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $L/gemm_tests.log | tr '\n' ' ')"
for r in 1 2; do for off in 0 1; do
  DMOE_FP8_CONSUMER_OFFSET=$off timeout 90 build-gpu/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral --routing balanced \
    --rounds 1 --sustain-ms 100 --ops w13_fprop_fp8,w2_fprop_fp8,w2_dgrad_fp8 > $L/gemm_ep2_off${off}_r$r.log 2>&1
  echo "GEMM EP2 offset=$off round $r rc=$?"; grep "(pick)" $L/gemm_ep2_off${off}_r$r.log | awk '{print $2, $4, $7, $9, $12, $16}'
done; done
for off in 0 1; do
  DMOE_FP8_CONSUMER_OFFSET=$off timeout 90 build-gpu/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b,mixtral,dsv3_prefill --routing random \
    --rounds 1 --sustain-ms 100 --ops w13_fprop_fp8,w2_fprop_fp8,w2_dgrad_fp8 > $L/gemm_ep1_off$off.log 2>&1
  echo "GEMM EP1 random offset=$off rc=$?"; grep "(pick)" $L/gemm_ep1_off$off.log | awk '{print $2, $4, $7, $9, $12, $16}'
done
for s in qwen3_30b mixtral; do for off in 0 1; do
  DMOE_FP8_CONSUMER_OFFSET=$off timeout 60 build-gpu/dist-moe bench --shape $s --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_${s}_off$off.log 2>&1
  echo "layer $s offset=$off rc=$?: $(grep -E '^forward\+backward|BF16 layer forward\+backward|fwd:w13|fwd:w2 |bwd:w2_dgrad|bwd:w13_dgrad' $L/layer_${s}_off$off.log | tr -s ' ' | tr '\n' '|')"
done; done
timeout 110 build-gpu/dmoe_launch -n 1 --timeout 100 -- build-gpu/tests/dist_moe_fp8_blockwise_training_tests > $L/fp8bw_train.log 2>&1
echo "fp8bw training suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/fp8bw_train.log | head -4 | tr '\n' ' ')"
