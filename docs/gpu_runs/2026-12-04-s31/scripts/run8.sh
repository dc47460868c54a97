#!/usr/bin/env bash
# s31 r8 (the final tree): per-instruction counts (ncu source page) of the FP8-blockwise 128x256 W13
# FPROP (qwen3_30b EP2) and the 128x256 WGRAD (mixtral EP2 W13, FP32 out), for the next session's plan.
O=${OUT:-/tmp/o}; L=/tmp/s31r8; mkdir -p $O $L
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target bench_grouped_gemm >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
prof() {  # tag shape op kernel-regex
  timeout 120 ncu --clock-control none --kernel-name-base demangled -k "regex:$4" --launch-skip 2 -c 1 \
    --section SourceCounters --section SpeedOfLight --section ComputeWorkloadAnalysis -o $L/$1 \
    build-gpu/bench/bench_grouped_gemm --ep 2 --shapes $2 --routing balanced --ops $3 --iters 3 --sustain-ms 0 > $L/$1_run.txt 2>&1
  timeout 60 ncu --import $L/$1.ncu-rep --page source --csv --print-source sass > $L/$1_sass.csv 2>&1
  timeout 60 ncu --import $L/$1.ncu-rep --page details > $L/$1_details.txt 2>&1
  echo "ncu $1 rc=$? at $((SECONDS-T0)) s: $(grep -E 'Duration|SM Frequency|Compute \(SM\) Throughput|Issue Slots Busy' $L/$1_details.txt | tr -s ' ' | tr '\n' '|')"
}
prof w13 qwen3_30b w13_fprop_fp8 'Sm90Fp8BlockwiseMainloop<dist_moe::gemm::MainloopConfig<\(dist_moe::gemm::GemmKind\)0, \(int\)128, \(int\)256'
prof wgrad mixtral w13_wgrad_fp8 'Sm90Fp8BlockwiseMainloop<dist_moe::gemm::MainloopConfig<\(dist_moe::gemm::GemmKind\)2, \(int\)128, \(int\)256'
