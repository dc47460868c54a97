#!/usr/bin/env bash
# s54 r1: the torch tests, first the files s53 and s54 changed (s53's run5 never got a machine):
# test_single_rank.py, test_mega.py, test_mxfp8.py one at a time within BUDGET (docs/test_coverage.md,
# "Added in session 53 / 54"), then the rest of tests/torch (test_examples_run.py among them) while
# time is left.
RUN_NAME=torch54; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_native dist_moe_torch || exit 1
echo "built at $((SECONDS-T0)) s"
torch_tests test_single_rank test_mega test_mxfp8  # (BUDGET: the call's limit in seconds, if shorter)
