#!/usr/bin/env bash
# Session 76's first call: on an H200, s74's next.sh (what #24 / #25 / #28 owe an H200) within 360 s, then s75's
# r4.sh (G155's why: the gathered quantizers on the layer's own gather, A / B and ncu) with what is left; on an
# H100 (next.sh ran there in s75 r1), r4.sh alone. Each script's logs land in its own $OUT folder.
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
O=${OUT:-/tmp/o}
if [[ $card == *H200* ]]; then
  OUT=$O/next BUDGET=360 bash docs/gpu_runs/2026-12-07-s74/scripts/next.sh
  OUT=$O/r4 BUDGET=200 bash docs/gpu_runs/2026-12-07-s75/scripts/r4.sh
else
  OUT=$O/r4 BUDGET=230 bash docs/gpu_runs/2026-12-07-s75/scripts/r4.sh
fi
