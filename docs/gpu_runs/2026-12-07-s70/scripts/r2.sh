#!/usr/bin/env bash
# s70 r2: the FP8-blockwise training suite (the oracle's FP8-blockwise pipeline and the BF16 reference,
# issue #27's case list) on main with G144 as landed -- r1 ran G144's r3 version through the quantizer
# gtests, the MXFP8 Mega cases and the torch training loop, but this suite only on r2's version (s69).
# The device time left after r1 (~330 s) allows a start and this one step.
RUN_NAME=s70r2; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader
OUT=$L scripts/quick_build.sh dmoe_launch dist_moe_fp8_blockwise_training_tests || exit 1
lim=$(( $(left) - 5 )); [ $lim -gt 150 ] && lim=150
[ $lim -gt 40 ] && layer_suite fp8bw_train dist_moe_fp8_blockwise_training_tests B $lim
grep -E "PASS case|FAIL" $L/suite_fp8bw_train_B.log | cut -c1-110 | head -24
