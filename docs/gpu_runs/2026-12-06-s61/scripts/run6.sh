#!/usr/bin/env bash
# s61 r6: the session's closing check on HEAD -- the whole GPU gtest suite (G128 changed the NVFP4
# staged decode kernels; r3 ran the NVFP4 / Mega gtests, the NVFP4 layer suite and the NVFP4 / Mega
# torch tests on them). On an H200 instead: run4.sh's owed A / B of G126 + G128.
RUN_NAME=s61r6; source scripts/device_run_prelude.sh
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
[[ $gpu == *H200* ]] && exec bash docs/gpu_runs/2026-12-06-s61/scripts/run4.sh  # (its own logs)
OUT=$L scripts/quick_build.sh dist_moe_gpu_tests || exit 1
echo "built at $((SECONDS-T0)) s"
gtests all '*' $(( $(left) - 10 ))
