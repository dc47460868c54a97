#!/usr/bin/env bash
# Session 25 run 1: verify the expanded-rows branch.
O=${OUT:-/tmp/o}; mkdir -p $O
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
OUT=$O/chk DMOE_STAGES="build" scripts/gpu_check.sh > $O/chk.txt 2>&1; tail -3 $O/chk.txt
build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmNvfp4*:Nvfp4ExpandRows*:GroupedGemmMxfp8*:GroupedGemmFp8*' > $O/gemm_tests.log 2>&1
grep -E "FAILED|PASSED" $O/gemm_tests.log | tail -8
for s in dsv3_decode dsv3_prefill qwen3_30b; do
  timeout 120 build-gpu/dist-moe bench --shape $s --format nvfp4 --mode infer --no-baseline --iters 10 --sustain-ms 50 > $O/bench_$s.log 2>&1
  echo "== $s"; grep -E "fwd:w13|fwd:w2|inference forward|BF16 layer|copy|weight" $O/bench_$s.log | head -12
done
OUT=$O/st DMOE_STAGES="nvfp4 fp8bw mxfp8 torch" TORCH_TESTS="tests/torch/test_nvfp4.py tests/torch/test_mxfp8.py tests/torch/test_single_rank.py" TORCH_EXAMPLES="block_scaled_inference" scripts/gpu_check.sh > $O/st.txt 2>&1
sed -n '/=== summary/,$p' $O/st.txt | tail -25
