#!/usr/bin/env bash
# s33 r1: the FP8-blockwise 128x256 WGRAD staging its epilogue through four TMA buffers per
# warpgroup (deep staging, the tree) against two (A: r1_deep_staging.patch reversed) and against a
# diagnostic copy that skips the WGRAD epilogue at run time (C: r1_diag_no_wgrad_epilogue.patch: the
# ceiling of any epilogue overlap). Tests on the tree: the FP8 WGRAD GEMM tests, the FP8-blockwise
# training suite. Then bench_grouped_gemm (BF16 gradients accumulated, the layer's case) A/B/C
# alternated, and the training layers A/B alternated.
O=${OUT:-/tmp/o}; L=/tmp/s33r1; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
R=docs/gpu_runs/2026-12-04-s33
newest() { ls -t $L/$1_*.log | head -1; }
for v in A C; do mkdir -p /tmp/$v && tar -cf - --exclude='./build*' . | tar -xf - -C /tmp/$v; done
(cd /tmp/A && git apply -R $OLDPWD/$R/r1_deep_staging.patch 2>/dev/null || patch -R -p1 < $OLDPWD/$R/r1_deep_staging.patch) > $L/patch_A.log 2>&1
(cd /tmp/C && git apply $OLDPWD/$R/r1_diag_no_wgrad_epilogue.patch 2>/dev/null || patch -p1 < $OLDPWD/$R/r1_diag_no_wgrad_epilogue.patch) > $L/patch_C.log 2>&1
echo "A: $(grep -c 'tma_deep().fp8_blockwise_cols' /tmp/A/src/gemm/grouped_gemm_launch.h) deep entries; C: $(grep -c DIAGNOSTIC /tmp/C/include/dist_moe/device/gemm/kernel.cuh) diag"
cfg() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" -DDIST_MOE_NCCL_ROOT=$NCCL; }
( cfg . build-gpu && cmake --build build-gpu -j 8 --target dist_moe_gpu_tests dist-moe dmoe_launch bench_grouped_gemm \
    dist_moe_fp8_blockwise_training_tests ) > $L/build.log 2>&1 &
( cfg /tmp/A /tmp/A/build-A && cmake --build /tmp/A/build-A -j 4 --target bench_grouped_gemm dist-moe dmoe_launch ) > $L/build_A.log 2>&1 &
( cfg /tmp/C /tmp/C/build-C && cmake --build /tmp/C/build-C -j 4 --target bench_grouped_gemm ) > $L/build_C.log 2>&1 &
wait
ln -sfn /tmp/A/build-A build-A; ln -sfn /tmp/C/build-C build-C; ln -sfn build-gpu build-B
for b in build-B/dist-moe build-A/dist-moe build-A/bench/bench_grouped_gemm build-C/bench/bench_grouped_gemm; do
  [ -x $b ] || { echo "missing $b"; tail -20 $L/build*.log; exit 1; }; done
echo "build done at $((SECONDS-T0)) s"
timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmFp8Wgrad*' > $L/gemm_tests.log 2>&1
echo "FP8 WGRAD GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|Failure' $L/gemm_tests.log | head -6 | tr '\n' ' ')"
timeout 150 build-gpu/dmoe_launch -n 1 --timeout 140 -- build-gpu/tests/dist_moe_fp8_blockwise_training_tests > $L/fp8_training.log 2>&1
echo "fp8_blockwise_training rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/fp8_training.log | head -2 | tr '\n' ' ')"
G="--ops w13_wgrad_fp8,w2_wgrad_fp8 --wgrad-accumulate --fp8-wgrad-bf16 --routing balanced --iters 10 --sustain-ms 100"
for v in A B C A B C; do
  timeout 60 build-$v/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b,mixtral $G > $L/gg_ep1_${v}_$SECONDS.log 2>&1
  echo "ep1 $v: $(grep -E '^fp8 ' $(newest gg_ep1_$v) | tr -s ' ' | cut -d" " -f2,4,10,12,15,19 | tr '\n' '|')"
done
for v in A B C A B; do
  timeout 60 build-$v/bench/bench_grouped_gemm --ep 2 --shapes dsv3_prefill $G > $L/gg_dsv3_${v}_$SECONDS.log 2>&1
  echo "dsv3 ep2 $v: $(grep -E '^fp8 ' $(newest gg_dsv3_$v) | tr -s ' ' | cut -d" " -f2,4,10,12,15,19 | tr '\n' '|')"
done
for s in qwen3_30b qwen3_30b; do for v in A B; do
  timeout 60 build-$v/dist-moe bench --shape $s --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_${s}_${v}_$SECONDS.log 2>&1
  echo "layer $s $v rc=$?: $(grep -hE '^forward\+backward|BF16 layer forward\+backward|wgrad' $(newest layer_${s}_$v) | tr -s ' ' | tr '\n' '|')"
done; done
for v in A B; do
  timeout 90 build-$v/dist-moe bench --shape dsv3_prefill --experts 128 --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_dsv3_${v}.log 2>&1
  echo "layer dsv3_prefill 128 experts $v rc=$?: $(grep -E '^forward\+backward|BF16 layer forward\+backward|wgrad' $L/layer_dsv3_${v}.log | tr -s ' ' | tr '\n' '|')"
done
