#!/usr/bin/env bash
# s33 r5: Nsight Compute on the kept FP8-blockwise WGRAD (old gradients prefetched into L2, G72),
# BF16 gradients accumulated: qwen3_30b EP1 W13 (epilogue-heavy, 4 k blocks per tile) and
# dsv3_prefill EP2 W13 (bound by the gradients' HBM traffic). No code change.
O=${OUT:-/tmp/o}; L=/tmp/s33r5; mkdir -p $O $L
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" -DDIST_MOE_NCCL_ROOT=$NCCL &&
  cmake --build build-gpu -j 16 --target bench_grouped_gemm ) > $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
prof() {  # name, bench args
  timeout 120 ncu --kernel-name-base demangled --kernel-name regex:"GemmKind\)2.*E4m3" --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section Occupancy build-gpu/bench/bench_grouped_gemm --ops w13_wgrad_fp8 --routing balanced --iters 2 \
    --wgrad-accumulate --fp8-wgrad-bf16 "${@:2}" > $L/ncu_$1.log 2>&1
  echo "$1 rc=$? at $((SECONDS-T0)) s: $(grep -E 'Duration|SM Frequency|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|No Eligible|Warp Cycles Per Issued' $L/ncu_$1.log | tr -s ' ' | tr '\n' '|')"
}
prof qwen3_ep1 --ep 1 --shapes qwen3_30b
prof dsv3_ep2 --ep 2 --shapes dsv3_prefill
