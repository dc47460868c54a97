#!/usr/bin/env bash
# s67: the owed s66 runs, chosen by the card that came: G140 (the FP8 WGRAD pick, owed on the H200)
# on an H200, G141 (Mega's early NVFP4 epilogue loads, any card) otherwise. Each is one call's work.
S66=docs/gpu_runs/2026-12-06-s66/scripts
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
case "$card" in
  *H200*) exec bash $S66/run2.sh ;;
  *) exec bash $S66/run3.sh ;;
esac
