#!/usr/bin/env bash
# s78 c1: what issue #25 (MXFP8) still owes its card on main 3428c64 (G158 / G159's 64-deep W13 promotion):
# the 12-row MXFP8 GEMM table as the training layer runs it (EP2 sizes, balanced, two rounds, x our BF16 pick),
# the MXFP8 training layer at qwen3_30b / mixtral / dsv3_prefill (128 experts) beside our BF16 layer, the MXFP8
# decode layer beside our BF16 decode, then the whole MXFP8 training suite (forward held to 5e-3). Any card;
# the first line names it. ~450 s on a fresh machine.
RUN_NAME=c1; BUDGET=${BUDGET:-560}; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist-moe bench_grouped_gemm dmoe_launch dist_moe_mxfp8_pipeline_tests || exit 1
echo "built at $((SECONDS-T0)) s"
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
  echo "mxfp8 $shape rc=$?: $(grep -E '^forward\+backward|^BF16 layer forward\+backward|saved' $L/layer_$shape.log | \
    sed -E 's/ +/ /g' | tr '\n' ';')"
done
timeout 60 build-gpu/dist-moe bench --shape dsv3_decode --mode infer --format mxfp8 --no-baseline --iters 10 \
  --sustain-ms 50 > $L/decode_mxfp8.log 2>&1
echo "decode mxfp8 rc=$?: $(grep -E '^inference forward|^BF16 layer|weights read' $L/decode_mxfp8.log | sed -E 's/ +/ /g' | tr '\n' ';')"
arm_dir() { echo build-gpu; }
suite_cases mxfp8_train dist_moe_mxfp8_pipeline_tests 200 > $L/cases.txt
head -1 $L/cases.txt
grep -o "case [A-Za-z0-9_]* ([^)]*) \[max relL2 vs [a-z0-9_]* oracle: out [0-9.e+-]*" $L/cases.txt |
  sed -E 's/ \([^)]*\) \[max relL2 vs [a-z0-9_]* oracle: out/:/; s/^case //' | tr '\n' ' '; echo
