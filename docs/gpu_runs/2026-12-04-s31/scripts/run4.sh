#!/usr/bin/env bash
# s31 r4: the FP8-blockwise WGRAD k loop with its per-block integer work hoisted (G68: fragment and
# scale offsets once per tile, B descriptors by 32-bit advance from stage 0's) against what was meant
# to be main's loop (it was r1's pipelined loop: see below and G68)
# (r4_baseline_header.patch applied to a copy of the tree, build-old), alternated in one run.
# Correctness on the new loop: the FP8 grouped GEMM tests and the FP8-blockwise training suite.
# Also: Nsight Compute's per-instruction counts of the new kernel (mixtral EP2 W13, FP32 out).
O=${OUT:-/tmp/o}; L=/tmp/s31r4; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
RUN=docs/gpu_runs/2026-12-04-s31
mkdir -p /tmp/oldsrc && tar -cf - --exclude='./build*' . | tar -xf - -C /tmp/oldsrc
# As run, this line copied a full copy of the baseline header (r4_old_mainloop_fp8_blockwise.cuh, since
# replaced by the patch that turns the run's header into it). That baseline was 5fa700c's header --
# r1's pipelined loop as the default -- not session 22's loop as intended (G68).
patch -s -p1 -d /tmp/oldsrc < $RUN/r4_baseline_header.patch
cfg() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" -DDIST_MOE_NCCL_ROOT=$NCCL; }
( cfg . build-gpu && cmake --build build-gpu -j 10 --target dist_moe_gpu_tests bench_grouped_gemm dist-moe dmoe_launch \
    dist_moe_fp8_blockwise_training_tests ) > $L/build.log 2>&1 &
( cfg /tmp/oldsrc /tmp/oldsrc/build-old && cmake --build /tmp/oldsrc/build-old -j 6 --target bench_grouped_gemm dist-moe dmoe_launch ) > $L/build_old.log 2>&1 &
wait
ln -sfn /tmp/oldsrc/build-old build-old
[ -x build-gpu/dist-moe ] && [ -x build-old/dist-moe ] || { tail -20 $L/build.log $L/build_old.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmFp8*' > $L/gemm_tests.log 2>&1
echo "GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $L/gemm_tests.log | tr '\n' ' ')"
timeout 120 build-gpu/dmoe_launch -n 1 --timeout 110 -- build-gpu/tests/dist_moe_fp8_blockwise_training_tests > $L/training.log 2>&1
echo "training suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/training.log | head -3 | tr '\n' ' ')"
for round in 1 2; do for v in gpu old; do
  timeout 90 build-$v/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral,dsv3_prefill --routing balanced,random --rounds 1 \
    --sustain-ms 100 --ops w13_wgrad_fp8,w2_wgrad_fp8 > $L/wgrad_${v}_$round.log 2>&1
  echo "wgrad bench $v round $round rc=$?"; grep '^fp8' $L/wgrad_${v}_$round.log | awk -v v=$v '{print v, $2, $3, $4, $10, $12, $15, $19}'
done; done
for s in qwen3_30b mixtral; do for v in gpu old gpu old; do
  timeout 60 build-$v/dist-moe bench --shape $s --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_${s}_$v.log 2>&1
  echo "layer $s $v rc=$?: $(grep -E '^forward\+backward|BF16 layer forward\+|wgrad' $L/layer_${s}_$v.log | tr -s ' ' | tr '\n' '|')"
done; done
FP8='Sm90Fp8BlockwiseMainloop<dist_moe::gemm::MainloopConfig<\(dist_moe::gemm::GemmKind\)2'
timeout 150 ncu --clock-control none --kernel-name-base demangled -k "regex:$FP8" --launch-skip 2 -c 1 \
  --section SourceCounters --section SpeedOfLight --section ComputeWorkloadAnalysis -o $L/fp8_src \
  build-gpu/bench/bench_grouped_gemm --ep 2 --shapes mixtral --routing balanced --ops w13_wgrad_fp8 --iters 3 --sustain-ms 0 > $L/fp8_src_run.txt 2>&1
timeout 120 ncu --import $L/fp8_src.ncu-rep --page source --csv --print-source sass > $L/fp8_src_sass.csv 2>&1
echo "ncu rc=$? at $((SECONDS-T0)) s"
