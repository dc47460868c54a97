#!/usr/bin/env bash
# s35 r2: FP8-blockwise GEMMs at 256 local experts (DeepSeek-V3 on one GPU): the one-stage-shallower
# fallbacks (128x256 s3, 128x128 s5) -- their GEMM tests (every compiled configuration, the heuristic at
# 256 experts), the block-scaled suites with the e256_k8 case, the training-loop torch tests again; the
# fallbacks' cost against the picks at 128 experts (dsv3_prefill EP2 sizes, interleaved sweep), the
# GEMMs at EP1's 256 experts, and the FP8-blockwise / MXFP8 training layers at dsv3_prefill EP1.
O=${OUT:-/tmp/o}; L=/tmp/s35r2; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && cmake --build build-gpu -j 16 --target dist_moe_gpu_tests dmoe_launch dist-moe \
    dist_moe_fp8_blockwise_training_tests dist_moe_mxfp8_pipeline_tests bench_grouped_gemm dist_moe_native \
    dist_moe_torch ) > $L/build.log 2>&1
for b in dist-moe tests/dist_moe_gpu_tests tests/dist_moe_fp8_blockwise_training_tests bench/bench_grouped_gemm; do
  [ -x build-gpu/$b ] || { echo "missing $b"; tail -30 $L/build.log; exit 1; }; done
echo "build done at $((SECONDS-T0)) s"
timeout 200 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmFp8*' > $L/fp8_gemm_tests.log 2>&1
echo "GroupedGemmFp8* rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/fp8_gemm_tests.log | tr '\n' ' ')"
grep -E "E=256|E=300" $L/fp8_gemm_tests.log | head -4
for t in fp8_blockwise_training mxfp8_pipeline; do
  timeout 200 build-gpu/dmoe_launch -n 1 --timeout 190 -- build-gpu/tests/dist_moe_${t}_tests > $L/suite_$t.log 2>&1
  echo "$t rc=$? at $((SECONDS-T0)) s: $(grep -E 'e256|ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_$t.log | head -3 | tr '\n' ' ')"
done
PYTHONPATH=$PWD/python timeout 200 python3 -m pytest -q -s tests/torch/test_training_loop.py > $L/torch_loop.log 2>&1
echo "training loop rc=$? at $((SECONDS-T0)) s: $(grep -E 'largest step gap|passed|failed' $L/torch_loop.log | cut -c1-60,300-420 | tail -3 | tr '\n' ' ')"
timeout 240 build-gpu/bench/bench_grouped_gemm --ep 2 --shapes dsv3_prefill --routing balanced,random \
  --ops w13_fprop_fp8,w2_fprop_fp8,w13_dgrad_fp8,w2_dgrad_fp8 --sweep --sweep-match 128x --rounds 3 --sustain-ms 100 > $L/sweep_ep2.log 2>&1
echo "sweep EP2 rc=$? at $((SECONDS-T0)) s"; grep -E "^fp8 " $L/sweep_ep2.log | grep -E "_s3_|_s4_|_s5_|_s6_" | grep -v c2 | tr -s ' ' | cut -c1-150
timeout 150 build-gpu/bench/bench_grouped_gemm --ep 1 --shapes dsv3_prefill --routing balanced \
  --ops w13_fprop_fp8,w2_fprop_fp8,w13_dgrad_fp8,w2_dgrad_fp8 --rounds 3 --sustain-ms 100 > $L/gemm_ep1.log 2>&1
echo "GEMMs EP1 (256 experts) rc=$? at $((SECONDS-T0)) s"; grep -E "^fp8 " $L/gemm_ep1.log | tr -s ' ' | cut -c1-150
for f in fp8_blockwise mxfp8; do
  timeout 120 build-gpu/dist-moe bench --shape dsv3_prefill --format $f --no-baseline --iters 5 --sustain-ms 100 > $L/layer_dsv3_ep1_$f.log 2>&1
  echo "layer dsv3_prefill EP1 (256 experts) $f rc=$? at $((SECONDS-T0)) s: $(grep -E '^forward\+backward|BF16 layer forward\+backward|rror' $L/layer_dsv3_ep1_$f.log | tr -s ' ' | tr '\n' '|')"
done
