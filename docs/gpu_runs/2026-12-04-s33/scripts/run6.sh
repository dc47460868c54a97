#!/usr/bin/env bash
# s33 r6: the FP8-blockwise 128x256 WGRAD with its warpgroups staggered (warpgroup 1 starts a tile
# once warpgroup 0 has finished the tile's first k block: r6_stagger.patch, the tree) against the
# tree without it (A: the patch reversed). B: the FP8 WGRAD GEMM tests, the FP8-blockwise training
# suite; bench_grouped_gemm (BF16 gradients accumulated) and the training layers A/B alternated;
# the torch FP8-blockwise tests last.
O=${OUT:-/tmp/o}; L=/tmp/s33r6; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
R=docs/gpu_runs/2026-12-04-s33
newest() { ls -t $L/$1_*.log | head -1; }
mkdir -p /tmp/A && tar -cf - --exclude='./build*' . | tar -xf - -C /tmp/A
(cd /tmp/A && patch -R -p1 < $OLDPWD/$R/r6_stagger.patch) > $L/patch_A.log 2>&1
echo "A: $(grep -c TileStartedHook /tmp/A/include/dist_moe/device/gemm/kernel.cuh) stagger (0 expected)"
cfg() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" -DDIST_MOE_NCCL_ROOT=$NCCL; }
( cfg . build-gpu && cmake --build build-gpu -j 10 --target dist_moe_gpu_tests dist-moe dmoe_launch bench_grouped_gemm \
    dist_moe_fp8_blockwise_training_tests dist_moe_native dist_moe_torch ) > $L/build.log 2>&1 &
( cfg /tmp/A /tmp/A/build-A && cmake --build /tmp/A/build-A -j 6 --target bench_grouped_gemm dist-moe dmoe_launch ) > $L/build_A.log 2>&1 &
wait
ln -sfn /tmp/A/build-A build-A; ln -sfn build-gpu build-B
for b in build-B/dist-moe build-B/bench/bench_grouped_gemm build-A/dist-moe build-A/bench/bench_grouped_gemm; do
  [ -x $b ] || { echo "missing $b"; tail -20 $L/build*.log; exit 1; }; done
echo "build done at $((SECONDS-T0)) s"
timeout 60 build-B/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmFp8Wgrad*' > $L/B_gemm_tests.log 2>&1
echo "B FP8 WGRAD GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|Failure' $L/B_gemm_tests.log | head -4 | tr '\n' ' ')"
timeout 60 build-B/dmoe_launch -n 1 --timeout 55 -- build-B/tests/dist_moe_fp8_blockwise_training_tests > $L/B_training.log 2>&1
echo "B fp8_blockwise_training rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/B_training.log | head -1)"
G="--ops w13_wgrad_fp8,w2_wgrad_fp8 --routing balanced --iters 10 --sustain-ms 100 --wgrad-accumulate --fp8-wgrad-bf16"
row() { grep -E '^fp8 ' $1 | sed 's/pick ([a-z0-9]* out, padded tokens)//' | tr -s ' ' | cut -d" " -f2,4,5,10 | tr '\n' '|'; }
for v in A B A B; do
  timeout 40 build-$v/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b $G > $L/gg_ep1_${v}_$SECONDS.log 2>&1
  echo "ep1 $v: $(row $(newest gg_ep1_$v))"
done
for v in A B; do
  timeout 40 build-$v/bench/bench_grouped_gemm --ep 2 --shapes dsv3_prefill,mixtral $G > $L/gg_ep2_${v}_$SECONDS.log 2>&1
  echo "ep2 $v: $(row $(newest gg_ep2_$v))"
done
for s in qwen3_30b qwen3_30b; do for v in A B; do
  timeout 40 build-$v/dist-moe bench --shape $s --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_${s}_${v}_$SECONDS.log 2>&1
  echo "layer $s $v rc=$?: $(grep -hE '^forward\+backward|BF16 layer forward\+backward|wgrad' $(newest layer_${s}_$v) | tr -s ' ' | tr '\n' '|')"
done; done
PYTHONPATH=$PWD/python timeout 60 python3 -m pytest -q tests/torch/test_fp8_blockwise.py > $L/B_torch.log 2>&1
echo "B torch fp8_blockwise rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/B_torch.log)"
