#!/usr/bin/env bash
# s33 r4: r3's lookahead with the tiles decoded once each in draw order (r3 decoded the current tile
# again after the one ahead; the scheduler's expert cursor only moves forward, so r3 computed wrong
# tiles): the tree (B) against r2's prefetch at the tile's own load (A: r4_lookahead.patch reversed).
# B: the WGRAD GEMM tests and the suites with accumulating WGRADs; A/B in bench_grouped_gemm and
# the training layers, alternated. A (the fallback tree): every GPU GEMM / quantizer test, every
# single-GPU suite, the torch FP8-blockwise and MXFP8 tests.
O=${OUT:-/tmp/o}; L=/tmp/s33r4; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
R=docs/gpu_runs/2026-12-04-s33
newest() { ls -t $L/$1_*.log | head -1; }
mkdir -p /tmp/A && tar -cf - --exclude='./build*' . | tar -xf - -C /tmp/A
(cd /tmp/A && patch -R -p1 < $OLDPWD/$R/r4_lookahead.patch) > $L/patch_A.log 2>&1
echo "A: $(grep -c 'WorkTile after' /tmp/A/include/dist_moe/device/gemm/kernel.cuh) lookahead (0 expected)"
SUITES="fp8_blockwise_training fp8_blockwise_pipeline mxfp8_pipeline nvfp4_pipeline pipeline"
TGT="dist_moe_gpu_tests dist-moe dmoe_launch bench_grouped_gemm $(for s in $SUITES; do echo dist_moe_${s}_tests; done)"
cfg() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" -DDIST_MOE_NCCL_ROOT=$NCCL; }
( cfg . build-gpu && cmake --build build-gpu -j 8 --target $TGT ) > $L/build.log 2>&1 &
( cfg /tmp/A /tmp/A/build-A && cmake --build /tmp/A/build-A -j 8 --target $TGT dist_moe_native dist_moe_torch ) > $L/build_A.log 2>&1 &
wait
ln -sfn /tmp/A/build-A build-A; ln -sfn build-gpu build-B
for b in build-B/dist-moe build-B/bench/bench_grouped_gemm build-A/dist-moe build-A/bench/bench_grouped_gemm build-A/tests/dist_moe_gpu_tests; do
  [ -x $b ] || { echo "missing $b"; tail -20 $L/build*.log; exit 1; }; done
echo "build done at $((SECONDS-T0)) s"
suite() { timeout 150 build-$1/dmoe_launch -n 1 --timeout 140 -- build-$1/tests/dist_moe_$2_tests > $L/$1_$2.log 2>&1
  echo "$1 $2 rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/$1_$2.log | head -1)"; }
timeout 100 build-B/tests/dist_moe_gpu_tests --gtest_filter='*Wgrad*' > $L/B_gemm_wgrad_tests.log 2>&1
echo "B WGRAD GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|Failure' $L/B_gemm_wgrad_tests.log | head -4 | tr '\n' ' ')"
for s in fp8_blockwise_training pipeline mxfp8_pipeline; do suite B $s; done
G="--ops w13_wgrad,w2_wgrad,w13_wgrad_fp8,w2_wgrad_fp8 --routing balanced --iters 10 --sustain-ms 100 --wgrad-accumulate --fp8-wgrad-bf16"
row() { grep -E '^fp8 |^ *(qwen3_30b|mixtral|dsv3_prefill) +balanced +w(13|2)_wgrad +128' $1 | sed 's/pick ([a-z0-9]* out, padded tokens)//' |
  tr -s ' ' | cut -d' ' -f1-7 | tr '\n' '|'; }
for v in A B A B; do
  timeout 60 build-$v/bench/bench_grouped_gemm --ep 2 --shapes dsv3_prefill,qwen3_30b $G > $L/gg_ep2_${v}_$SECONDS.log 2>&1
  echo "ep2 $v: $(row $(newest gg_ep2_$v))"
done
for s in qwen3_30b dsv3_prefill qwen3_30b dsv3_prefill; do for v in A B; do
  x=""; [ $s = dsv3_prefill ] && x="--experts 128"
  timeout 60 build-$v/dist-moe bench --shape $s $x --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_${s}_${v}_$SECONDS.log 2>&1
  echo "layer $s $v rc=$?: $(grep -hE '^forward\+backward|BF16 layer forward\+backward|wgrad' $(newest layer_${s}_$v) | tr -s ' ' | tr '\n' '|')"
done; done
timeout 200 build-A/tests/dist_moe_gpu_tests > $L/A_gpu_tests.log 2>&1
echo "A GPU tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/A_gpu_tests.log | head -3 | tr '\n' ' ')"
for s in $SUITES; do suite A $s; done
(cd /tmp/A && PYTHONPATH=$PWD/python DIST_MOE_BUILD_DIR=/tmp/A/build-A timeout 150 python3 -m pytest -q tests/torch/test_fp8_blockwise.py tests/torch/test_mxfp8.py) > $L/A_torch.log 2>&1
echo "A torch fp8_blockwise + mxfp8 rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/A_torch.log)"
