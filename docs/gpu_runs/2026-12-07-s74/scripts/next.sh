#!/usr/bin/env bash
# The next session's first call (written in session 74, whose device time ran out): what issues #24 / #25 /
# #28 still owe an H200 (s73's h200.sh: the quantizer table, the 12-row MXFP8 GEMM table as the training
# layer runs it, the MXFP8 layer at three shapes, Mega MXFP8 training against the staged layer), then both
# block-scaled training suites whole on main with each case's seconds (s74 r2's question, never run: the
# oracle's threads of 853dfc7 under the GPU suites; s74 r3's cases before its patch's failure took 0.1-1.1 s).
# Any card runs it; the first line names the card. ~450 s on a fresh machine.
RUN_NAME=next; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist-moe bench_quantize bench_grouped_gemm dmoe_launch \
  dist_moe_fp8_blockwise_training_tests dist_moe_mxfp8_pipeline_tests || exit 1
echo "built at $((SECONDS-T0)) s"
timeout 90 build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b > $L/quant_bench.log 2>&1
echo "bench_quantize rc=$? at $((SECONDS-T0)) s: $(grep -E 'quantizers at' $L/quant_bench.log)"
grep -E " below$" $L/quant_bench.log
timeout 120 build-gpu/bench/bench_grouped_gemm --shapes qwen3_30b,mixtral,dsv3_prefill --ep 2 --routing balanced \
  --ops w13_fprop_mxfp8s,w2_fprop_mxfp8s,w13_dgrad_mxfp8s,w2_dgrad_mxfp8s --rounds 2 --iters 5 --sustain-ms 100 \
  --sweep-match no_sweep > $L/gemm_table.log 2>&1
echo "gemm table rc=$? at $((SECONDS-T0)) s (shape op ms x-bf16):"
grep -E "^fp8 .*\(pick\)" $L/gemm_table.log | awk '{for (i = 1; i <= NF; i++) if ($i == "x" && $(i + 1) == "bf16") r = $(i + 2); print $2, $4, $7, r}'
for args in "qwen3_30b 60" "mixtral 80" "dsv3_prefill 100 --experts 128"; do
  set -- $args
  shape=$1 limit=$2; shift 2
  [ "$(left)" -gt "$limit" ] || break
  timeout "$limit" build-gpu/dist-moe bench --shape "$shape" "$@" --format mxfp8 --no-baseline --iters 3 \
    --sustain-ms 100 > $L/layer_$shape.log 2>&1
  echo "mxfp8 $shape rc=$?: $(grep -E '^forward\+backward|^BF16 layer forward\+backward' $L/layer_$shape.log | \
    sed -E 's/ +/ /g' | tr '\n' ';')"
done
if [ "$(left)" -gt 60 ]; then
  timeout 60 build-gpu/dist-moe bench --shape qwen3_30b --format mxfp8 --pipeline mega --no-baseline --iters 5 \
    --sustain-ms 100 > $L/mega_train_qwen3.log 2>&1
  echo "mega training qwen3_30b rc=$?: $(grep -E '^forward\+backward|^staged layer fwd\+bwd' \
    $L/mega_train_qwen3.log | sed -E 's/ +/ /g' | tr '\n' ';')"
fi
for suite in "fp8bw_train dist_moe_fp8_blockwise_training_tests" "mxfp8_train dist_moe_mxfp8_pipeline_tests"; do
  set -- $suite
  [ "$(left)" -gt 40 ] || break
  layer_suite "$1" "$2" B $(( $(left) - 10 ))
  grep -E "PASS case|FAIL case" $L/suite_$1_B.log | sed -E 's/.*(PASS|FAIL) case ([^ ]+) \(([0-9.]+) s\).*/\1 \2 \3/' | tr '\n' ';'; echo
done
