#!/usr/bin/env bash
# s64 r2: s63's r3 as written (G135, the two-CTA NVFP4 decode tile, T = main's pick against X =
# DMOE_GEMM_EXPERIMENTAL=1), with its patch applied to the device's copy of the tree. Its question is
# the H200's, so on any other card this stops at once (rc 3).
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 ||
  { nvidia-smi --query-gpu=name --format=csv,noheader; echo "not an H200: r2 not run"; exit 3; }
git apply docs/gpu_runs/2026-12-06-s63/g135_two_ctas_over_g134.patch || { echo "patch does not apply"; exit 2; }
exec bash docs/gpu_runs/2026-12-06-s63/scripts/run3.sh
