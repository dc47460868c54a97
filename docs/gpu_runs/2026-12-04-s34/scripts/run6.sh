#!/usr/bin/env bash
# s34 r6: the FP8-blockwise FPROP / DGRAD tiles on the static schedule (S: r6_fp8_static_schedule.patch)
# against the tree's dynamic one. r5's balanced sweep had static 0-4% faster; here random top-k rows
# (the layer bench's routing): every configuration swept, then the training layers tree / S alternated.
O=${OUT:-/tmp/o}; L=/tmp/s34r6; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
R=docs/gpu_runs/2026-12-04-s34
newest() { ls -t $L/$1_*.log | head -1; }
mkdir -p /tmp/S && tar -cf - --exclude='./build*' . | tar -xf - -C /tmp/S
(cd /tmp/S && patch -p1 < $OLDPWD/$R/r6_fp8_static_schedule.patch) > $L/patch_S.log 2>&1
cfg() { cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" -DDIST_MOE_NCCL_ROOT=$NCCL; }
( cfg . build-gpu && cmake --build build-gpu -j 10 --target bench_grouped_gemm dist-moe dmoe_launch ) > $L/build.log 2>&1 &
( cfg /tmp/S /tmp/S/build-S && cmake --build /tmp/S/build-S -j 6 --target dist-moe dmoe_launch ) > $L/build_S.log 2>&1 &
wait
ln -sfn /tmp/S/build-S build-S; ln -sfn build-gpu build-T
for b in build-T/dist-moe build-S/dist-moe build-T/bench/bench_grouped_gemm; do
  [ -x $b ] || { echo "missing $b"; tail -30 $L/build*.log; exit 1; }; done
echo "build done at $((SECONDS-T0)) s"
G="--ops w13_fprop_fp8,w2_fprop_fp8,w13_dgrad_fp8,w2_dgrad_fp8 --routing random --sweep --rounds 3 --iters 10 --sustain-ms 50"
timeout 150 build-T/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b $G > $L/sweep_qwen3_ep1.log 2>&1
timeout 150 build-T/bench/bench_grouped_gemm --ep 2 --shapes mixtral,dsv3_prefill $G > $L/sweep_ep2.log 2>&1
echo "sweeps done at $((SECONDS-T0)) s"
grep -hE "^fp8 .*(fprop|dgrad)_fp8 +128x256x128_s4_(tma|tma_dyn) " $L/sweep_*.log | tr -s ' ' | cut -d' ' -f2,4,5,6 | paste -sd'|'
sel='fwd:w13 |fwd:w2 |w2_dgrad|w13_dgrad|^forward\+backward|BF16 layer forward\+backward'
layer() {  # arm shape [extra]
  timeout 90 build-$1/dist-moe bench --shape $2 --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 $3 > $L/layer_$2_$1_$SECONDS.log 2>&1
  echo "layer $2 $1 rc=$?: $(grep -hE "$sel" $(newest layer_$2_$1) | tr -s ' ' | cut -d' ' -f1-3 | tr '\n' '|')"
}
for i in 1 2; do for v in T S; do layer $v qwen3_30b; done; done
for v in T S; do layer $v mixtral; done
for v in T S; do layer $v dsv3_prefill "--experts 128"; done
