#!/usr/bin/env bash
# s29 r5: (1) the block-scaled training layers under both preheat protocols (--preheat gemm: our BF16
# GEMMs before every measurement, as before; self: each timed call's own load), twice each, and
# (2) where the FP8-blockwise 128x256 W13 FPROP kernel's cycles go (ncu stage: warp states, stall
# reasons, source counters; qwen3_30b per-rank EP2 sizes).
O=${OUT:-/tmp/o}; L=/tmp/s29r5; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
OUT=$L/ncu NCU_SHAPE=qwen3_30b NCU_OPS=w13_fprop_fp8 \
  NCU_KERNELS='fp8w13=Fp8BlockwiseMainloop<dist_moe::gemm::MainloopConfig<\(dist_moe::gemm::GemmKind\)0, 128, 256, 4, \(dist_moe::gemm::ConsumerSchedule\)0, \(dist_moe::gemm::WeightSplit\)1' \
  DMOE_STAGES="build ncu" scripts/gpu_check.sh > $L/chk.log 2>&1
echo "gpu_check rc=$? at $((SECONDS-T0)) s"; grep -E "Stall|stalled|Duration|Issued Ipc|Compute \(SM\)|Warp Cycles" $L/ncu/summary.txt | head -16
for round in 1 2; do
  for s in qwen3_30b mixtral; do
    for p in gemm self; do
      timeout 150 build-gpu/dist-moe bench --shape $s --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 --preheat $p \
        > $L/layer_${s}_${p}_$round.log 2>&1
      echo "fp8bw $s preheat=$p round $round rc=$?: $(grep -E '^forward\+backward|BF16 layer forward\+backward' $L/layer_${s}_${p}_$round.log | tr -s ' ' | tr '\n' '|')"
    done
  done
done
for p in gemm self; do
  timeout 150 build-gpu/dist-moe bench --shape qwen3_30b --format mxfp8 --no-baseline --iters 5 --sustain-ms 100 --preheat $p > $L/layer_mx_qwen3_$p.log 2>&1
  echo "mxfp8 qwen3_30b preheat=$p rc=$?: $(grep -E '^forward\+backward|BF16 layer forward\+backward' $L/layer_mx_qwen3_$p.log | tr -s ' ' | tr '\n' '|')"
done
