#!/usr/bin/env bash
# s30 r6: (a) main's 128x256 FP8 FPROP (4 x n64 RS slices) with the consumer turn word in the
# pipeline's storage and two B scales per tile; (b) the same tile as two n128 SS slices with 240
# consumer registers (-DDMOE_FP8_SLICE_N128). Correctness of both (FP8 GEMM tests; (a) also the
# FP8-blockwise training suite), GEMM bench A/B (offset 0|1, a|b) at EP2 sizes, the promotion bench
# with the pipeline (mode 3) candidates, and the training layer.
O=${OUT:-/tmp/o}; L=/tmp/s30r6; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" -DDIST_MOE_NCCL_ROOT=$NCCL > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target dist_moe_gpu_tests bench_grouped_gemm bench_wgmma_rate dist-moe dmoe_launch dist_moe_fp8_blockwise_training_tests >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build a done at $((SECONDS-T0)) s"
cmake -S . -B build-b -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" -DDIST_MOE_NCCL_ROOT=$NCCL \
  -DCMAKE_CUDA_FLAGS=-DDMOE_FP8_SLICE_N128 > $L/build_b.log 2>&1 &&
  cmake --build build-b -j 16 --target dist_moe_gpu_tests bench_grouped_gemm >> $L/build_b.log 2>&1 && B=b || { B=; tail -5 $L/build_b.log; }
echo "build b done at $((SECONDS-T0)) s (variant b: ${B:-failed})"
for v in gpu $B; do
  timeout 100 build-$v/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmFp8*:GroupedGemmMxfp8*' > $L/gemm_tests_$v.log 2>&1
  echo "GEMM tests $v rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED' $L/gemm_tests_$v.log | tr '\n' ' ')"
done
timeout 60 build-gpu/bench/bench_wgmma_rate --promotion --iters 8000 > $L/promotion.log 2>&1
echo "promotion rc=$?"; grep -E "^tile|  3 " $L/promotion.log
RUNS=("gpu 0" "gpu 1"); [ -n "$B" ] && RUNS+=("b 1" "b 0")
for r in 1 2; do for run in "${RUNS[@]}"; do set -- $run
  DMOE_FP8_CONSUMER_OFFSET=$2 timeout 60 build-$1/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral --routing balanced \
    --rounds 1 --sustain-ms 100 --ops w13_fprop_fp8,w2_fprop_fp8,w2_dgrad_fp8 > $L/gemm_$1_off$2_r$r.log 2>&1
  echo "GEMM $1 offset=$2 round $r rc=$?: $(grep '(pick)' $L/gemm_$1_off$2_r$r.log | awk '{printf "%s %s %s x%s | ", $2, $4, $7, $16}')"
done; done
for s in qwen3_30b mixtral; do
  timeout 60 build-gpu/dist-moe bench --shape $s --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_$s.log 2>&1
  echo "layer $s rc=$?: $(grep -E '^forward\+backward|BF16 layer forward\+backward|fwd:w13|fwd:w2 |bwd:w2_dgrad|bwd:w13_dgrad' $L/layer_$s.log | tr -s ' ' | tr '\n' '|')"
done
timeout 110 build-gpu/dmoe_launch -n 1 --timeout 100 -- build-gpu/tests/dist_moe_fp8_blockwise_training_tests > $L/fp8bw_train.log 2>&1
echo "fp8bw training suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/fp8bw_train.log | head -4 | tr '\n' ' ')"
