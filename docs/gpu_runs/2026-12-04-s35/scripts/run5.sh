#!/usr/bin/env bash
# s35 r5: the FP8-blockwise FPROP / DGRAD tiles with one stage fewer (128x256 s3, 128x128 s5) against the
# picks (s4, s6) at the layers' EP1 shapes, qwen3_30b and mixtral, balanced and random rows, interleaved:
# at dsv3_prefill's EP2 sizes (r2) s3 ran 0-3% faster than s4 (more L1 beside a smaller shared-memory carve-out?).
O=${OUT:-/tmp/o}; L=/tmp/s35r5; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && cmake --build build-gpu -j 16 --target bench_grouped_gemm ) > $L/build.log 2>&1
[ -x build-gpu/bench/bench_grouped_gemm ] || { echo "build failed"; tail -30 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 400 build-gpu/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b,mixtral --routing balanced,random \
  --ops w13_fprop_fp8,w2_fprop_fp8,w13_dgrad_fp8,w2_dgrad_fp8 --rounds 3 --sustain-ms 50 > $L/sweep_ep1.log 2>&1
echo "sweep rc=$? at $((SECONDS-T0)) s"
grep -E "^fp8 " $L/sweep_ep1.log | grep -E "_dyn" | grep -v c2 | awk '{print $2, $3, $4, $5, $6, $7}'
