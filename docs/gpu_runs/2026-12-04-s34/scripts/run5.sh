#!/usr/bin/env bash
# s34 r5: every compiled FP8-blockwise configuration of every layer GEMM (bench_grouped_gemm --sweep,
# 3 interleaved rounds, medians), the training layer's cases (WGRAD adding into BF16 gradients):
# qwen3_30b at EP1 (the layer bench's sizes), mixtral and dsv3_prefill at EP2 sizes. No code change:
# does any configuration beat the heuristic's pick since G66 / G69 / G72 changed the kernels?
O=${OUT:-/tmp/o}; L=/tmp/s34r5; mkdir -p $O $L
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=$NCCL > $L/cmake.log 2>&1
cmake --build build-gpu -j 16 --target bench_grouped_gemm > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
OPS=w13_fprop_fp8,w2_fprop_fp8,w13_dgrad_fp8,w2_dgrad_fp8,w13_wgrad_fp8,w2_wgrad_fp8
G="--ops $OPS --routing balanced --wgrad-accumulate --fp8-wgrad-bf16 --sweep --rounds 3 --iters 10 --sustain-ms 50"
timeout 200 build-gpu/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b $G > $L/sweep_qwen3_ep1.log 2>&1
echo "qwen3 ep1 rc=$? at $((SECONDS-T0)) s"
timeout 200 build-gpu/bench/bench_grouped_gemm --ep 2 --shapes mixtral,dsv3_prefill $G > $L/sweep_ep2.log 2>&1
echo "mixtral, dsv3 ep2 rc=$? at $((SECONDS-T0)) s"
for f in sweep_qwen3_ep1 sweep_ep2; do
  grep -E '^fp8 .*(pick|sweep)' $L/$f.log | tr -s ' ' | sed -E 's/TFLOP\/s//; s/ balanced//' | cut -d' ' -f2-7,9-11
done
