#!/usr/bin/env bash
# s32 r6: Nsight Compute on the fused dxy kernel (FP8 blockwise, qwen3_30b EP2 sizes, standalone in
# bench_quantize) and, for comparison, the unfused rows + columns quantizer on the same shape: speed
# of light, memory workload, warp states, occupancy. For the record of what holds the fused kernel
# at 0.79x the copy rate (G70); no code changed.
O=${OUT:-/tmp/o}; L=/tmp/s32r6; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target bench_quantize >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
for k in swiglu_backward_quantize_kernel quantize_rows_cols_kernel; do
  timeout 200 ncu --kernel-name-base demangled --kernel-name regex:"$k<.*Fp8BlockwiseFormat" --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section Occupancy --section LaunchStats \
    build-gpu/bench/bench_quantize --shapes qwen3_30b --ep 2 --iters 1 --sustain-ms 0 > $L/ncu_$k.txt 2>&1
  echo "ncu $k rc=$? at $((SECONDS-T0)) s"
  grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Block Size|Grid Size|Stall|Warp Cycles Per Issued|Issue Slot|L2 Hit|Mem Busy|Max Bandwidth" $L/ncu_$k.txt | head -30
done
