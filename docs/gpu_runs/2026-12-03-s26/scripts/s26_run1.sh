#!/usr/bin/env bash
# Session 26 run 1: verify branch s25-nvfp4-decode-4wg-unverified (kernel.cuh generalized to N consumer
# warpgroups: every GEMM), then measure G58 (NVFP4 4-warpgroup decode), G59 (NVFP4 64 expanded prefill,
# experimental), G60 (MXFP8 16-token decode) against the alternatives in the same build.
O=${OUT:-/tmp/o}; mkdir -p $O
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
T0=$SECONDS
OUT=$O/chk DMOE_STAGES="build" scripts/gpu_check.sh > $O/chk.txt 2>&1; tail -2 $O/chk.txt
echo "build done at $((SECONDS-T0)) s"
timeout 240 build-gpu/tests/dist_moe_gpu_tests > $O/gpu_tests.log 2>&1; echo "gpu tests rc=$?"
grep -E "^\[  FAILED|PASSED|tests ran" $O/gpu_tests.log | tail -12
echo "tests done at $((SECONDS-T0)) s"
b() { timeout 90 build-gpu/dist-moe bench --shape $1 --format $2 --mode infer --no-baseline --iters 10 --sustain-ms 50; }
b dsv3_decode nvfp4 > $O/bench_nvfp4_decode.log 2>&1
DMOE_GEMM_EXPERIMENTAL=1 b dsv3_decode nvfp4 > $O/bench_nvfp4_decode_exp.log 2>&1
b dsv3_decode mxfp8 > $O/bench_mxfp8_decode.log 2>&1
DMOE_GEMM_EXPERIMENTAL=1 b dsv3_decode mxfp8 > $O/bench_mxfp8_decode_exp.log 2>&1
b dsv3_prefill nvfp4 > $O/bench_nvfp4_prefill.log 2>&1
DMOE_GEMM_EXPERIMENTAL=1 b dsv3_prefill nvfp4 > $O/bench_nvfp4_prefill_exp.log 2>&1
for f in $O/bench_*.log; do echo "== $(basename $f)"; grep -E "fwd:w13  |fwd:w2  |inference forward|BF16 layer|error|rror" $f | head -6; done
echo "benches done at $((SECONDS-T0)) s"
OUT=$O/st DMOE_STAGES="pipeline nvfp4 mxfp8 fp8bw" scripts/gpu_check.sh > $O/st.txt 2>&1
sed -n '/=== summary/,$p' $O/st.txt | grep -E "rc=|ok|FAIL" | tail -16
echo "all done at $((SECONDS-T0)) s"
