#!/usr/bin/env bash
# s33 r3: an accumulating WGRAD's producer draws one tile ahead of the one it loads and prefetches
# that tile's old output then (r3_lookahead.patch, the tree) against r2's prefetch at the tile's own
# load (A: the patch reversed). Tests on the tree: every WGRAD GEMM test, the FP8-blockwise training
# suite, the BF16 pipeline suite. bench_grouped_gemm (BF16 gradients accumulated) A/B alternated,
# the training layers A/B alternated, then Nsight Compute on the tree's qwen3_30b FP8 W13 WGRAD.
O=${OUT:-/tmp/o}; L=/tmp/s33r3; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
R=docs/gpu_runs/2026-12-04-s33
newest() { ls -t $L/$1_*.log | head -1; }
mkdir -p /tmp/A && tar -cf - --exclude='./build*' . | tar -xf - -C /tmp/A
(cd /tmp/A && patch -R -p1 < $OLDPWD/$R/r3_lookahead.patch) > $L/patch_A.log 2>&1
echo "A: $(grep -c 'int32_t after' /tmp/A/include/dist_moe/device/gemm/kernel.cuh) lookahead (0 expected)"
cfg() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" -DDIST_MOE_NCCL_ROOT=$NCCL; }
( cfg . build-gpu && cmake --build build-gpu -j 10 --target dist_moe_gpu_tests dist-moe dmoe_launch bench_grouped_gemm \
    dist_moe_fp8_blockwise_training_tests dist_moe_pipeline_tests ) > $L/build.log 2>&1 &
( cfg /tmp/A /tmp/A/build-A && cmake --build /tmp/A/build-A -j 6 --target bench_grouped_gemm dist-moe dmoe_launch ) > $L/build_A.log 2>&1 &
wait
ln -sfn /tmp/A/build-A build-A; ln -sfn build-gpu build-B
for b in build-B/dist-moe build-B/bench/bench_grouped_gemm build-A/dist-moe build-A/bench/bench_grouped_gemm; do
  [ -x $b ] || { echo "missing $b"; tail -20 $L/build*.log; exit 1; }; done
echo "build done at $((SECONDS-T0)) s"
timeout 200 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='*Wgrad*' > $L/gemm_tests.log 2>&1
echo "WGRAD GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|Failure' $L/gemm_tests.log | head -6 | tr '\n' ' ')"
for t in fp8_blockwise_training pipeline; do
  timeout 150 build-gpu/dmoe_launch -n 1 --timeout 140 -- build-gpu/tests/dist_moe_${t}_tests > $L/$t.log 2>&1
  echo "$t rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/$t.log | head -2 | tr '\n' ' ')"
done
G="--ops w13_wgrad,w2_wgrad,w13_wgrad_fp8,w2_wgrad_fp8 --routing balanced --iters 10 --sustain-ms 100 --wgrad-accumulate --fp8-wgrad-bf16"
row() { grep -E '^fp8 |^ *(qwen3_30b|mixtral|dsv3_prefill) +balanced +w(13|2)_wgrad +128' $1 | sed 's/pick ([a-z0-9]* out, padded tokens)//' |
  tr -s ' ' | cut -d' ' -f1-7 | tr '\n' '|'; }
for v in A B A B; do
  timeout 90 build-$v/bench/bench_grouped_gemm --ep 2 --shapes dsv3_prefill,qwen3_30b $G > $L/gg_ep2_${v}_$SECONDS.log 2>&1
  echo "ep2 $v: $(row $(newest gg_ep2_$v))"
done
for v in A B A B; do
  timeout 90 build-$v/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b $G > $L/gg_ep1_${v}_$SECONDS.log 2>&1
  echo "ep1 $v: $(row $(newest gg_ep1_$v))"
done
for s in qwen3_30b qwen3_30b qwen3_30b; do for v in A B; do
  timeout 60 build-$v/dist-moe bench --shape $s --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_${s}_${v}_$SECONDS.log 2>&1
  echo "layer $s $v rc=$?: $(grep -hE '^forward\+backward|BF16 layer forward\+backward|wgrad' $(newest layer_${s}_$v) | tr -s ' ' | tr '\n' '|')"
done; done
for v in A B A B; do
  timeout 90 build-$v/dist-moe bench --shape dsv3_prefill --experts 128 --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_dsv3_${v}_$SECONDS.log 2>&1
  echo "layer dsv3_prefill 128 experts $v rc=$?: $(grep -hE '^forward\+backward|BF16 layer forward\+backward|wgrad' $(newest layer_dsv3_$v) | tr -s ' ' | tr '\n' '|')"
done
timeout 150 ncu --kernel-name-base demangled --kernel-name regex:"GemmKind\)2.*E4m3" --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  build-B/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b --ops w13_wgrad_fp8 --routing balanced --iters 2 \
  --wgrad-accumulate --fp8-wgrad-bf16 > $L/ncu_qwen3_w13_wgrad_fp8.log 2>&1
echo "ncu rc=$?: $(grep -E 'Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Compute \(SM\)|Issued Ipc|No Eligible|Stall' $L/ncu_qwen3_w13_wgrad_fp8.log | tr -s ' ' | head -14 | tr '\n' '|')"
