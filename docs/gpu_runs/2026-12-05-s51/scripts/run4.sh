#!/usr/bin/env bash
# s51 r4: r3's MXFP8 layer suite with --filter mega was killed by its 100 s launcher timeout with no
# case line (s47: 2/2 within the same limit on an H200). Again with 450 s, to tell slow from hung.
RUN_NAME=s51r4; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name --format=csv,noheader
OUT=$L scripts/quick_build.sh dmoe_launch dist_moe_mxfp8_pipeline_tests || exit 1
echo "built at $((SECONDS-T0)) s"
t0=$SECONDS
timeout 470 build-gpu/dmoe_launch -n 1 --timeout 450 -- build-gpu/tests/dist_moe_mxfp8_pipeline_tests --filter mega \
  > $L/suite_mega_mxfp8.log 2>&1
echo "mxfp8 mega rc=$? in $((SECONDS-t0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_mega_mxfp8.log | head -3 | tr '\n' ' ')"
grep -E "PASS case|FAIL case" $L/suite_mega_mxfp8.log | cut -c1-200
