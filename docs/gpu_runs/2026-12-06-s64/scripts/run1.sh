#!/usr/bin/env bash
# s64 r1: s63's r2 as written (issue #26's H200 rows on HEAD, G134 A / B), not run in s63 (no H200
# came). Its rows are judged on an H200 and were measured on H100s already, so on any other card this
# stops at once (rc 3) and spends only the start.
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 ||
  { nvidia-smi --query-gpu=name --format=csv,noheader; echo "not an H200: r1 not run"; exit 3; }
exec bash docs/gpu_runs/2026-12-06-s63/scripts/run2.sh
