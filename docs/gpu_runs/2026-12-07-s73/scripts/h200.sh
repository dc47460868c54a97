#!/usr/bin/env bash
# The H200 measurements issues #24 and #25 still owe (no H200 came in sessions 69-73), in one call
# (~450 s on a warm build): issue #24's quantizer table against this card's copy, issue #25's GEMM table as
# the MXFP8 training layer runs its GEMMs (FPROP and DGRAD on operands at shared scales, ops *_mxfp8s; our
# BF16 GEMM of the same shape in the same run) and the MXFP8 training layer against our BF16 layer at
# qwen3_30b, mixtral and dsv3_prefill's EP2 rank of 128 experts (after G152). Any card runs it; its first
# line names the card. Last, issue #28's Mega MXFP8 training against the staged layer.
RUN_NAME=h200; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist-moe bench_quantize bench_grouped_gemm || exit 1
echo "built at $((SECONDS-T0)) s"
timeout 90 build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b > $L/quant_bench.log 2>&1
echo "bench_quantize rc=$? at $((SECONDS-T0)) s: $(grep -E 'quantizers at' $L/quant_bench.log)"
grep -E " below$" $L/quant_bench.log
timeout 120 build-gpu/bench/bench_grouped_gemm --shapes qwen3_30b,mixtral,dsv3_prefill --ep 2 --routing balanced \
  --ops w13_fprop_mxfp8s,w2_fprop_mxfp8s,w13_dgrad_mxfp8s,w2_dgrad_mxfp8s --rounds 2 --iters 5 --sustain-ms 100 \
  --sweep-match no_sweep > $L/gemm_table.log 2>&1
echo "gemm table rc=$? at $((SECONDS-T0)) s"
grep -E "^fp8 .*\(pick\)" $L/gemm_table.log | sed -E 's/ +/ /g' | cut -d' ' -f2,4,5,7,11,14,15
for args in "qwen3_30b 60" "mixtral 80" "dsv3_prefill 100 --experts 128"; do
  set -- $args
  shape=$1 limit=$2; shift 2
  [ "$(left)" -gt "$limit" ] || break
  timeout "$limit" build-gpu/dist-moe bench --shape "$shape" "$@" --format mxfp8 --no-baseline --iters 3 \
    --sustain-ms 100 > $L/layer_$shape.log 2>&1
  echo "mxfp8 $shape rc=$?: $(grep -E '^forward\+backward|^BF16 layer forward\+backward' $L/layer_$shape.log | \
    sed -E 's/ +/ /g' | tr '\n' ';')"
done
# Issue #28: Mega MXFP8 training against the staged layer since G149-G152 moved the staged one to the
# FP8-blockwise kernels (perf_history G153 expects ~0.85x; the two in one process).
if [ "$(left)" -gt 60 ]; then
  timeout 60 build-gpu/dist-moe bench --shape qwen3_30b --format mxfp8 --pipeline mega --no-baseline --iters 5 \
    --sustain-ms 100 > $L/mega_train_qwen3.log 2>&1
  echo "mega training qwen3_30b rc=$?: $(grep -E '^forward\+backward|^staged layer fwd\+bwd' \
    $L/mega_train_qwen3.log | sed -E 's/ +/ /g' | tr '\n' ';')"
fi
