#!/usr/bin/env bash
# s27 r3: the decode-tile widths by routed rows per expert (gemm_config.cpp, this tree): default
# (16 tokens up to 12 rows per expert, else 32) against DMOE_GEMM_EXPERIMENTAL=1 (past 16 rows:
# MXFP8 128x128, NVFP4 64 tokens), alternated, dsv3 dims at EP1; then the MXFP8 and NVFP4 pipeline
# test stages with the new picks.
O=${OUT:-/tmp/o}; L=/tmp/s27r3; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
OUT=$L/chk DMOE_STAGES="build" scripts/gpu_check.sh > $L/chk.txt 2>&1; tail -1 $L/chk.txt
echo "build done at $((SECONDS-T0)) s"
one() {  # T format tag [env...]
  local T=$1 f=$2 tag=$3; shift 3
  env "$@" DMOE_PRINT_GEMM_CONFIG=1 timeout 90 build-gpu/dist-moe bench --shape dsv3_decode --tokens $T --format $f --mode infer --no-baseline \
      --iters 10 --sustain-ms 50 > $L/bench_${f}_T${T}_$tag.log 2>&1
  echo "T=$T $f $tag rc=$?: $(grep -E '^inference forward' $L/bench_${f}_T${T}_$tag.log | awk '{print "layer",$3}') $(grep -E '^BF16 layer' $L/bench_${f}_T${T}_$tag.log | awk '{print "bf16",$4,$5}') $(grep -E '^fwd:w13  |^fwd:w2  ' $L/bench_${f}_T${T}_$tag.log | head -2 | awk '{printf "%s %s ", $1, $2}')"
}
for f in mxfp8 nvfp4; do one 256 $f dflt; done
for T in 384 512 768 1024; do
  for f in mxfp8 nvfp4; do
    one $T $f dflt
    one $T $f exp DMOE_GEMM_EXPERIMENTAL=1
  done
done
for T in 768 1024; do for f in mxfp8 nvfp4; do one $T $f dflt2; one $T $f exp2 DMOE_GEMM_EXPERIMENTAL=1; done; done
grep -h "swapab\|128x128" $L/bench_*_T1024_*.log | sort | uniq | head -20 > $L/configs.txt
OUT=$L/st DMOE_STAGES="mxfp8 nvfp4" scripts/gpu_check.sh > $L/st.txt 2>&1
grep -E "pipeline tests|trap tests|PASS|FAIL" $L/st.txt | tail -8
