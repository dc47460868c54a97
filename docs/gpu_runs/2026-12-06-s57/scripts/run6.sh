#!/usr/bin/env bash
# s57 r6 (one call): the final tree's torch package, every tests/torch file -- after r5, the in-place
# WGRAD accumulation fires post-accumulate hooks per contribution (test_mxfp8's source-grad row and
# two_rank_worker's accumulate cases over emulated peers count the accumulate op and the hooks).
RUN_NAME=s57r6; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_native dist_moe_torch dist-moe dmoe_launch || exit 1
echo "built at $((SECONDS-T0)) s"
BUDGET=500 torch_tests test_mxfp8 test_two_rank
