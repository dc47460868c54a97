#!/usr/bin/env bash
# s74 r2: both block-scaled training suites whole, each case's seconds (s73 added them; not run since), on
# the tree with the oracle's threads (853dfc7, not run on a GPU): where the MXFP8 suite's ~130 s go against
# FP8 blockwise's 28 s for the same 18 staged cases (s73 r2-r3, H100).
RUN_NAME=s74r2; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dmoe_launch dist_moe_fp8_blockwise_training_tests dist_moe_mxfp8_pipeline_tests || exit 1
echo "built at $((SECONDS-T0)) s"
layer_suite fp8bw_train dist_moe_fp8_blockwise_training_tests B 120
grep -E "PASS case|FAIL case" $L/suite_fp8bw_train_B.log | sed -E 's/.*(PASS|FAIL) case ([^ ]+) \(([0-9.]+) s\).*/\1 \2 \3/' | tr '\n' ';'; echo
layer_suite mxfp8_train dist_moe_mxfp8_pipeline_tests B $(( $(left) > 300 ? 290 : $(left) - 10 ))
grep -E "PASS case|FAIL case" $L/suite_mxfp8_train_B.log | sed -E 's/.*(PASS|FAIL) case ([^ ]+) \(([0-9.]+) s\).*/\1 \2 \3/' | tr '\n' ';'; echo
