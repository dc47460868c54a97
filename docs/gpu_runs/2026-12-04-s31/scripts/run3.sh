#!/usr/bin/env bash
# s31 r3 (main's kernels): the FP8-blockwise WGRAD issues ~2x the instructions its k loop needs
# (r2: ALU pipe 26%, FMA 27%, tensor 39%, IPC 1.94): its SASS (cuobjdump) and Nsight Compute's
# per-instruction samples (source page) at mixtral EP2 W13 sizes, FP32 output.
O=${OUT:-/tmp/o}; L=/tmp/s31r3; mkdir -p $O $L
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target bench_grouped_gemm >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
OBJ=$(find build-gpu -name 'grouped_gemm_sm90_wgrad.cu.o' | head -1)
cuobjdump -sass $OBJ > $L/wgrad_sass.txt 2>&1; echo "sass rc=$? $(wc -l < $L/wgrad_sass.txt) lines"
FP8='Sm90Fp8BlockwiseMainloop<dist_moe::gemm::MainloopConfig<\(dist_moe::gemm::GemmKind\)2'
timeout 200 ncu --clock-control none --kernel-name-base demangled -k "regex:$FP8" --launch-skip 2 -c 1 \
  --section SourceCounters --section WarpStateStats -o $L/fp8_src \
  build-gpu/bench/bench_grouped_gemm --ep 2 --shapes mixtral --routing balanced --ops w13_wgrad_fp8 --iters 3 --sustain-ms 0 > $L/fp8_src_run.txt 2>&1
echo "ncu rc=$? at $((SECONDS-T0)) s"
timeout 120 ncu --import $L/fp8_src.ncu-rep --page source --csv --print-source sass > $L/fp8_src_sass.csv 2>&1
echo "source page rc=$? $(wc -l < $L/fp8_src_sass.csv) lines"
timeout 60 ncu --import $L/fp8_src.ncu-rep --page details > $L/fp8_src_details.txt 2>&1
head -3 $L/fp8_src_sass.csv | cut -c1-600
