#!/usr/bin/env bash
# s27 r5: the final picks of G63 (MXFP8 inference 128x128 past 12 rows per expert; NVFP4 contexts
# expanding their tokens from 64 routed rows per expert): layer benches at T = 256, 512, 1024,
# 2048, 3072 (dsv3 dims, EP1), the MXFP8 / NVFP4 pipeline suites and their torch tests + example.
O=${OUT:-/tmp/o}; L=/tmp/s27r5; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
OUT=$L/chk DMOE_STAGES="build" scripts/gpu_check.sh > $L/chk.txt 2>&1; tail -1 $L/chk.txt
echo "build done at $((SECONDS-T0)) s"
row() { echo "$(grep -E '^inference forward' $1 | awk '{print "layer",$3}') $(grep -E '^BF16 layer' $1 | awk '{print "bf16",$4,$5}') $(grep -E '^fwd:w13  |^fwd:w2  ' $1 | head -2 | awk '{printf "%s %s ", $1, $2}')"; }
one() {  # T format
  local T=$1 f=$2
  DMOE_PRINT_GEMM_CONFIG=1 timeout 90 build-gpu/dist-moe bench --shape dsv3_decode --tokens $T --format $f --mode infer --no-baseline \
      --iters 10 --sustain-ms 50 > $L/bench_${f}_T${T}.log 2>&1
  echo "T=$T $f rc=$?: $(row $L/bench_${f}_T${T}.log) $(grep -ho -- '-> [0-9a-z_]*' $L/bench_${f}_T${T}.log | grep -v x64_s | sort -u | tr '\n' ' ')"
}
for T in 256 512 1024; do one $T mxfp8; one $T nvfp4; done
for T in 2048 3072; do one $T nvfp4; done
OUT=$L/st DMOE_STAGES="mxfp8 nvfp4 torch" TORCH_TESTS="tests/torch/test_nvfp4.py tests/torch/test_mxfp8.py" \
  TORCH_EXAMPLES="block_scaled_inference" scripts/gpu_check.sh > $L/st.txt 2>&1
grep -E "pipeline tests|trap tests|pytest|example|install" $L/st.txt | tail -8
