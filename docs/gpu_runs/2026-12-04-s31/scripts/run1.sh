#!/usr/bin/env bash
# s31 r1: the FP8-blockwise WGRAD k loop software-pipelined (double-buffered A fragments, G67)
# against session 22's loop (-DDMOE_FP8_WGRAD_SERIAL_LOOP, build-old), interleaved in one run.
# Correctness on the new loop: the FP8 grouped GEMM tests (bit-exact WGRAD cases included) and the
# FP8-blockwise training suite. Speed: WGRAD GEMMs at EP2 sizes (FP32 out) and the training layers
# (BF16 weight gradients, the deferred epilogue's kernel), new / old / new / old.
O=${OUT:-/tmp/o}; L=/tmp/s31r1; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
cfg() { cmake -S . -B $1 -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" -DDIST_MOE_NCCL_ROOT=$NCCL "${@:2}"; }
( cfg build-gpu && cmake --build build-gpu -j 10 --target dist_moe_gpu_tests bench_grouped_gemm dist-moe dmoe_launch \
    dist_moe_fp8_blockwise_training_tests ) > $L/build.log 2>&1 &
( cfg build-old -DCMAKE_CUDA_FLAGS=-DDMOE_FP8_WGRAD_SERIAL_LOOP && cmake --build build-old -j 6 --target bench_grouped_gemm dist-moe dmoe_launch ) > $L/build_old.log 2>&1 &
wait
[ -x build-gpu/dist-moe ] && [ -x build-old/dist-moe ] || { tail -20 $L/build.log $L/build_old.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmFp8*' > $L/gemm_tests.log 2>&1
echo "GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $L/gemm_tests.log | tr '\n' ' ')"
timeout 120 build-gpu/dmoe_launch -n 1 --timeout 110 -- build-gpu/tests/dist_moe_fp8_blockwise_training_tests > $L/training.log 2>&1
echo "training suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/training.log | head -3 | tr '\n' ' ')"
for round in 1 2; do for v in gpu old; do
  timeout 90 build-$v/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral,dsv3_prefill --routing balanced,random --rounds 1 \
    --sustain-ms 100 --ops w13_wgrad_fp8,w2_wgrad_fp8 > $L/wgrad_${v}_$round.log 2>&1
  echo "wgrad bench $v round $round rc=$?"; grep '^fp8' $L/wgrad_${v}_$round.log | awk -v v=$v '{print v, $2, $3, $4, $10, $12, $15, $19}'
done; done
for s in qwen3_30b mixtral; do for v in gpu old gpu old; do
  timeout 60 build-$v/dist-moe bench --shape $s --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_${s}_$v.log 2>&1
  echo "layer $s $v rc=$?: $(grep -E '^forward\+backward|BF16 layer|wgrad' $L/layer_${s}_$v.log | tr -s ' ' | tr '\n' '|')"
done; done
