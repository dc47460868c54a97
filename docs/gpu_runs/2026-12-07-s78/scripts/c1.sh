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
mxfp8_gemm_table 120
training_layers mxfp8
timeout 60 build-gpu/dist-moe bench --shape dsv3_decode --mode infer --format mxfp8 --no-baseline --iters 10 \
  --sustain-ms 50 > $L/decode_mxfp8.log 2>&1
echo "decode mxfp8 rc=$?: $(grep -E '^inference forward|^BF16 layer|weights read' $L/decode_mxfp8.log | sed -E 's/ +/ /g' | tr '\n' ';')"
arm_dir() { echo build-gpu; }
suite_margins mxfp8_train dist_moe_mxfp8_pipeline_tests 200
