#!/usr/bin/env bash
# s38 r3 (G87, second arm): r2's twin was the wide-unit loop on four stages and lost 4-9% to the
# five-stage pick; here the selector is flipped (wide units on five stages, the old loop on four),
# so the two runs together separate the unit width from the stage count.
O=${OUT:-/tmp/o}; L=/tmp/s38r3; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && cmake --build build-gpu -j 16 --target bench_grouped_gemm ) > $L/build.log 2>&1
[ -x build-gpu/bench/bench_grouped_gemm ] || { echo "missing bench"; tail -30 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 150 build-gpu/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral --routing balanced \
  --ops w13_fprop_mxfp8,w2_fprop_mxfp8,w13_dgrad_mxfp8,w2_dgrad_mxfp8 --sweep --rounds 3 --sustain-ms 100 > $L/gg_ep2.log 2>&1
echo "gg ep2 rc=$? at $((SECONDS-T0)) s"
grep -E "^fp8 .*128x128x128_s[45]_tma" $L/gg_ep2.log
