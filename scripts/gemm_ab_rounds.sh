#!/usr/bin/env bash
# Alternated bench_grouped_gemm runs of two builds, for the A / B of a block-scaled GEMM change:
# ROUNDS rounds of A then B (clock drift under sustained load hits both sides alike), each run's
# pick rows (FP8-blockwise, MXFP8, NVFP4: `fp8 ... (pick)`, our BF16 pick timed beside each)
# appended to ROWS as `ROW side round <row>`, the table of scripts/gemm_ab_table.py at the end.
#   scripts/gemm_ab_rounds.sh A_BIN B_BIN ROUNDS ROWS bench_grouped_gemm flags...
#   e.g. scripts/gemm_ab_rounds.sh .abtree/build-ab/bench/bench_grouped_gemm build-gpu/bench/bench_grouped_gemm \
#          3 /tmp/rows.txt --ep 2 --shapes qwen3_30b,mixtral --routing balanced --ops w13_fprop_fp8 --sweep-match NONE
set -uo pipefail
[ $# -ge 4 ] || { sed -n 2,8p "$0"; exit 2; }
a_bin=$1 b_bin=$2 rounds=$3 rows=$4
shift 4
for r in $(seq 1 "$rounds"); do
  for side in A B; do
    bin=$b_bin; [ "$side" = A ] && bin=$a_bin
    timeout 150 "$bin" --iters 10 --sustain-ms 200 "$@" 2>&1 |
      awk -v s="$side" -v r="$r" '$1 == "fp8" && $6 == "(pick)" {print "ROW", s, r, $0}' >> "$rows"
  done
  echo "gemm round $r of $rounds done"
done
python3 "$(dirname "$0")/gemm_ab_table.py" "$rows"
