#!/usr/bin/env bash
# s27 r4: NVFP4 contexts expanding their tokens to FP16 rows from 32 routed rows per expert (B, this
# tree) against main's 128 padded rows (A, .abtree), alternated at T = 1024..3072 (dsv3 dims, EP1);
# MXFP8's 128x128 tile from 12 rows per expert (DMOE_GEMM_EXPERIMENTAL=1) at T = 448, 512; then the
# MXFP8 / NVFP4 pipeline suites on B.
O=${OUT:-/tmp/o}; L=/tmp/s27r4; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NC=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cd .abtree && cmake -S . -B build-ab -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NC > $L/build_a.log 2>&1 && cmake --build build-ab -j 8 --target dist-moe dmoe_launch >> $L/build_a.log 2>&1; echo "A build rc=$?" ) &
OUT=$L/chk DMOE_STAGES="build" scripts/gpu_check.sh > $L/chk.txt 2>&1; tail -1 $L/chk.txt
wait
echo "builds done at $((SECONDS-T0)) s"
row() { echo "$(grep -E '^inference forward' $1 | awk '{print "layer",$3}') $(grep -E '^BF16 layer' $1 | awk '{print "bf16",$4,$5}') $(grep -E '^fwd:w13  |^fwd:w2  |^fwd:expand' $1 | awk '{printf "%s %s ", $1, $2}')"; }
one() {  # bin T format tag [env...]
  local bin=$1 T=$2 f=$3 tag=$4; shift 4
  env "$@" DMOE_PRINT_GEMM_CONFIG=1 timeout 90 $bin bench --shape dsv3_decode --tokens $T --format $f --mode infer --no-baseline \
      --iters 10 --sustain-ms 50 > $L/bench_${f}_T${T}_$tag.log 2>&1
  echo "T=$T $f $tag rc=$?: $(row $L/bench_${f}_T${T}_$tag.log)"
}
A=.abtree/build-ab/dist-moe; B=build-gpu/dist-moe
for T in 1024 1536 2048 3072; do one $A $T nvfp4 A; one $B $T nvfp4 B; done
for T in 1024 2048; do one $B $T nvfp4 B2; one $A $T nvfp4 A2; done
for T in 448 512; do one $B $T mxfp8 dflt; one $B $T mxfp8 exp DMOE_GEMM_EXPERIMENTAL=1; done
one $B 512 mxfp8 exp2 DMOE_GEMM_EXPERIMENTAL=1; one $B 512 mxfp8 dflt2
OUT=$L/st DMOE_STAGES="mxfp8 nvfp4" scripts/gpu_check.sh > $L/st.txt 2>&1
grep -E "pipeline tests|trap tests" $L/st.txt | tail -4
