#!/usr/bin/env bash
# s58 r7: upstream's RMSNorm peer-path row's two missing variants (BF16 + accumulate, MXFP8 Mega) in the
# two-rank worker: test_two_rank.py, whose emulated cases run them as one rank of EP2 and of EP4 on this
# GPU (the real two-rank cases skip on one GPU).
RUN_NAME=s58r7; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
R=$PWD
pytest_log two_rank 300 "$R/tests/torch/test_two_rank.py"
grep -E "rmsnorm" $L/two_rank.log | head -8
