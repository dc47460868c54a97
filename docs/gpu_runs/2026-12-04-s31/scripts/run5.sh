#!/usr/bin/env bash
# s31 r5: the FP8-blockwise 128x256 WGRAD tile (G69: two 128-column SS slices, three stages, the B
# scale copy clamped at K, one deferred BF16 chunk) picked where k % 256 == 0, against the 128x128
# tile: GEMMs with --sweep (every compiled FP8 WGRAD configuration, interleaved rounds), layers
# against a copy of the tree whose heuristic keeps 128x128 (r5_baseline_heuristic.patch, build-old).
# Correctness: the FP8 grouped GEMM tests (every compiled WGRAD configuration; K = 384 / 640 end a
# 128x256 tile half past K) and the FP8-blockwise training suite.
O=${OUT:-/tmp/o}; L=/tmp/s31r5; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
RUN=docs/gpu_runs/2026-12-04-s31
mkdir -p /tmp/oldsrc && tar -cf - --exclude='./build*' . | tar -xf - -C /tmp/oldsrc
# As run, a full copy of the baseline gemm_config.cpp was copied here (since replaced by the patch).
patch -s -p1 -d /tmp/oldsrc < $RUN/r5_baseline_heuristic.patch
cfg() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" -DDIST_MOE_NCCL_ROOT=$NCCL; }
( cfg . build-gpu && cmake --build build-gpu -j 10 --target dist_moe_gpu_tests bench_grouped_gemm dist-moe dmoe_launch \
    dist_moe_fp8_blockwise_training_tests ) > $L/build.log 2>&1 &
( cfg /tmp/oldsrc /tmp/oldsrc/build-old && cmake --build /tmp/oldsrc/build-old -j 6 --target dist-moe dmoe_launch ) > $L/build_old.log 2>&1 &
wait
ln -sfn /tmp/oldsrc/build-old build-old
[ -x build-gpu/dist-moe ] && [ -x build-old/dist-moe ] || { tail -20 $L/build.log $L/build_old.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 200 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmFp8*' > $L/gemm_tests.log 2>&1
echo "GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $L/gemm_tests.log | tr '\n' ' ')"
grep -E '^\[  FAILED' $L/gemm_tests.log | head -5
timeout 120 build-gpu/dmoe_launch -n 1 --timeout 110 -- build-gpu/tests/dist_moe_fp8_blockwise_training_tests > $L/training.log 2>&1
echo "training suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/training.log | head -3 | tr '\n' ' ')"
timeout 200 build-gpu/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral,dsv3_prefill --routing balanced,random --rounds 2 \
  --sustain-ms 100 --sweep --ops w13_wgrad_fp8,w2_wgrad_fp8 > $L/wgrad_sweep.log 2>&1
echo "wgrad sweep rc=$? at $((SECONDS-T0)) s"
grep '^fp8' $L/wgrad_sweep.log | grep -v '_dyn' | awk '{if ($5=="pick") print $2, $3, $4, "pick", $10, $12, $15, $19; else print $2, $3, $4, $6, $7, $9, $12, $16}'
for s in qwen3_30b mixtral; do for v in gpu old gpu old; do
  timeout 60 build-$v/dist-moe bench --shape $s --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_${s}_$v.log 2>&1
  echo "layer $s $v rc=$?: $(grep -E '^forward\+backward|BF16 layer forward\+|wgrad' $L/layer_${s}_$v.log | tr -s ' ' | tr '\n' '|')"
done; done
