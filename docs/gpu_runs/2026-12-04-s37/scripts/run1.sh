#!/usr/bin/env bash
# s37 r1 (G82): the MXFP8 rows + columns quantizer's scale layouts side by side, before any kernel
# change: bench_quantize --layouts (column scales feature-major vs token-block-major, row scales too),
# twice, at dsv3_prefill and qwen3_30b per-rank EP2 sizes.
O=${OUT:-/tmp/o}; L=/tmp/s37r1; mkdir -p $O $L
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && cmake --build build-gpu -j 16 --target bench_quantize ) > $L/build.log 2>&1
[ -x build-gpu/bench/bench_quantize ] || { echo "missing bench_quantize"; tail -30 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
for r in 1 2; do
  build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --layouts --iters 20 --sustain-ms 100 > $L/layouts$r.log 2>&1
  echo "run $r rc=$? at $((SECONDS-T0)) s"
  grep -A9 "scale layouts" $L/layouts$r.log
  grep -A9 "block-major column scales, by region" $L/layouts$r.log
done
