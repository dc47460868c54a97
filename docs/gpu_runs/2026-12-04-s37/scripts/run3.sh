#!/usr/bin/env bash
# s37 r3 (G83): the gathered rows + columns quantizers at every region shape (a CTA's copies wait for
# its row pointers: more feature tiles per CTA share that wait), with every other region sweep
# (--regions) for the picks beside them.
O=${OUT:-/tmp/o}; L=/tmp/s37r3; mkdir -p $O $L
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && cmake --build build-gpu -j 16 --target bench_quantize ) > $L/build.log 2>&1
[ -x build-gpu/bench/bench_quantize ] || { echo "missing bench_quantize"; tail -30 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --layouts --regions --iters 20 --sustain-ms 100 > $L/regions.log 2>&1
echo "rc=$? at $((SECONDS-T0)) s"
grep -A10 "by region" $L/regions.log | grep -v "^quantizer" 
sed -n '/^summary/,$p' $L/regions.log | grep -E "rows_cols|w_train_t|of 32"
