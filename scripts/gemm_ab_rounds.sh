#!/usr/bin/env bash
# Alternated bench_grouped_gemm runs of two builds, for the A / B of a GEMM change: ROUNDS rounds of
# A then B (clock drift under sustained load hits both sides alike), each run's rows appended to
# ROWS as `ROW side round shape routing op config MS ms TFLOPS TFLOP/s ...` -- BF16 ops as printed
# (with cuBLAS), block-scaled ops (`fp8 ...` lines: every configuration, the pick marked, our BF16
# pick timed beside it) their pick only, with "bf16 MS" at the end -- then the table of
# scripts/gemm_ab_table.py. Used by gpu_check.sh's treeab stage and by one-off run scripts.
#   scripts/gemm_ab_rounds.sh A_BIN B_BIN ROUNDS ROWS bench_grouped_gemm flags...
#   e.g. scripts/gemm_ab_rounds.sh .abtree/build-ab/bench/bench_grouped_gemm build-gpu/bench/bench_grouped_gemm \
#          3 /tmp/rows.txt --ep 2 --shapes qwen3_30b,mixtral --routing balanced --ops w13_fprop_fp8 --sweep-match none
set -uo pipefail
[ $# -ge 4 ] || { sed -n 2,10p "$0"; exit 2; }
a_bin=$1 b_bin=$2 rounds=$3 rows=$4
shift 4
for r in $(seq 1 "$rounds"); do
  for side in A B; do
    bin=$b_bin; [ "$side" = A ] && bin=$a_bin
    echo "==== gemm round $r side $side" >> "$rows"
    timeout 300 "$bin" --iters 10 --sustain-ms 200 "$@" 2>&1 |
      awk -v side="$side" -v r="$r" '
        $6 == "ms" && $8 == "TFLOP/s" {print "ROW", side, r, $0}
        $1 == "fp8" && $6 == "(pick)" {print "ROW", side, r, $2, $3, $4, $5, $7, "ms", $9, "TFLOP/s", "bf16", $12}' >> "$rows"
  done
  echo "gemm round $r of $rounds done"
done
python3 "$(dirname "$0")/gemm_ab_table.py" "$rows"
