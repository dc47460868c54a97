#!/usr/bin/env bash
# s27 r6: the FP8-blockwise inference layer at mid-sized batches (dsv3 dims, EP1): the 32-token
# swap-AB tile (default) against the M-grouped tiles past 12 routed rows per expert
# (DMOE_GEMM_EXPERIMENTAL=1), alternated; the FP8-blockwise suites with the variable set.
O=${OUT:-/tmp/o}; L=/tmp/s27r6; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
OUT=$L/chk DMOE_STAGES="build" scripts/gpu_check.sh > $L/chk.txt 2>&1; tail -1 $L/chk.txt
echo "build done at $((SECONDS-T0)) s"
row() { echo "$(grep -E '^inference forward' $1 | awk '{print "layer",$3}') $(grep -E '^BF16 layer' $1 | awk '{print "bf16",$4,$5}') $(grep -E '^fwd:w13  |^fwd:w2  ' $1 | head -2 | awk '{printf "%s %s ", $1, $2}')"; }
one() {  # T tag [env...]
  local T=$1 tag=$2; shift 2
  env "$@" DMOE_PRINT_GEMM_CONFIG=1 timeout 90 build-gpu/dist-moe bench --shape dsv3_decode --tokens $T --format fp8_blockwise --mode infer \
      --no-baseline --iters 10 --sustain-ms 50 > $L/bench_fp8bw_T${T}_$tag.log 2>&1
  echo "T=$T fp8bw $tag rc=$?: $(row $L/bench_fp8bw_T${T}_$tag.log) $(grep -ho -- '-> [0-9a-z_]*' $L/bench_fp8bw_T${T}_$tag.log | grep -v x64_s | sort -u | tr '\n' ' ')"
}
one 256 dflt
for T in 512 1024; do one $T dflt; one $T exp DMOE_GEMM_EXPERIMENTAL=1; done
one 1024 exp2 DMOE_GEMM_EXPERIMENTAL=1; one 1024 dflt2
DMOE_GEMM_EXPERIMENTAL=1 OUT=$L/st DMOE_STAGES="fp8bw" timeout 240 scripts/gpu_check.sh > $L/st.txt 2>&1
grep -E "fp8bw" $L/st.txt | tail -4
