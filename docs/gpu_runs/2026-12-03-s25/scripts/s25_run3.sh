#!/usr/bin/env bash
# Session 25 run 3: 16-token NVFP4 decode tile (DMOE_GEMM_EXPERIMENTAL) and the bounded h2 quantization.
O=${OUT:-/tmp/o}; mkdir -p $O
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
OUT=$O/chk DMOE_STAGES="build" scripts/gpu_check.sh > $O/chk.txt 2>&1; tail -1 $O/chk.txt
build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmNvfp4*:Nvfp4ExpandRows*:QuantizeNvfp4*' > $O/gemm_tests.log 2>&1
grep -E "FAILED|PASSED" $O/gemm_tests.log | tail -8
b() { timeout 120 build-gpu/dist-moe bench --shape $1 --format nvfp4 --mode infer --no-baseline --iters 10 --sustain-ms 50; }
for r in 1 2; do
  b dsv3_decode > $O/bench_decode32_$r.log 2>&1
  DMOE_GEMM_EXPERIMENTAL=1 b dsv3_decode > $O/bench_decode16_$r.log 2>&1
  for t in 32 16; do echo "== decode tile $t round $r"; grep -E "fwd:w13  |fwd:w2  |fwd:quantize_h2|inference forward|BF16 layer" $O/bench_decode${t}_$r.log | head -8; done
done
for s in dsv3_prefill qwen3_30b; do
  b $s > $O/bench_$s.log 2>&1
  echo "== $s"; grep -E "fwd:quantize_h2|fwd:w13  |fwd:w2  |inference forward|BF16 layer" $O/bench_$s.log | head -12
done
OUT=$O/st DMOE_STAGES="nvfp4" scripts/gpu_check.sh > $O/st.txt 2>&1
grep -E "pipeline tests|trap tests" $O/st.txt | tail -2
DMOE_GEMM_EXPERIMENTAL=1 OUT=$O/st16 DMOE_STAGES="nvfp4" scripts/gpu_check.sh > $O/st16.txt 2>&1
echo "with the 16 tile:"; grep -E "pipeline tests|trap tests" $O/st16.txt | tail -2
