#!/usr/bin/env bash
# Session 25 run 4: NVFP4 tiles over the real rows (tile_rows), the 16-token decode tile by default
# (DMOE_GEMM_EXPERIMENTAL=1: the 32-token one), the bounded h2 quantization.
O=${OUT:-/tmp/o}; mkdir -p $O
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
OUT=$O/chk DMOE_STAGES="build" scripts/gpu_check.sh > $O/chk.txt 2>&1; tail -1 $O/chk.txt
build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmNvfp4*:Nvfp4ExpandRows*:QuantizeNvfp4*:GroupedGemmDecode*:GroupedGemmMxfp8*:GroupedGemmFp8*' > $O/gemm_tests.log 2>&1
grep -E "FAILED|PASSED" $O/gemm_tests.log | tail -8
b() { timeout 120 build-gpu/dist-moe bench --shape $1 --format nvfp4 --mode infer --no-baseline --iters 10 --sustain-ms 50; }
b dsv3_decode > $O/bench_decode16.log 2>&1
DMOE_GEMM_EXPERIMENTAL=1 b dsv3_decode > $O/bench_decode32.log 2>&1
for t in 16 32; do echo "== decode tile $t"; grep -E "fwd:w13  |fwd:w2  |inference forward|BF16 layer" $O/bench_decode$t.log | head -8; done
for s in dsv3_prefill qwen3_30b; do
  b $s > $O/bench_$s.log 2>&1
  echo "== $s"; grep -E "fwd:w13  |fwd:w2  |inference forward|BF16 layer" $O/bench_$s.log | head -6
done
OUT=$O/st DMOE_STAGES="nvfp4 torch" TORCH_TESTS="tests/torch/test_nvfp4.py" TORCH_EXAMPLES="block_scaled_inference" scripts/gpu_check.sh > $O/st.txt 2>&1
sed -n '/=== summary/,$p' $O/st.txt | grep -E "nvfp4|test_nvfp4|block_scaled|rc="
DMOE_GEMM_EXPERIMENTAL=1 OUT=$O/st32 DMOE_STAGES="nvfp4" scripts/gpu_check.sh > $O/st32.txt 2>&1
echo "with the 32 tile:"; grep -E "pipeline tests|trap tests" $O/st32.txt | tail -2
