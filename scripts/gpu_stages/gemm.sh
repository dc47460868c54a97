# shellcheck shell=bash
# Stage gemm of scripts/gpu_check.sh (sourced; see its header): the SM90 grouped GEMMs.
#   ptxas  rebuild the GEMM objects with ptxas -v: registers, no stack frame, no spills, no C75xx
#          warning (scripts/gemm_ptxas_report.py: spills it lists as known pass), and wgmma (HGMMA,
#          QGMMA) per kernel in the SASS (cuobjdump);
#   tests  dist_moe_gpu_tests --gtest_filter='GroupedGemm*';
#   bench  bench_grouped_gemm (ours, cuBLAS dense, HBM copy; the sweep: every compiled configuration);
#   peer   torch._grouped_mm on the same counts (bench/grouped_mm_peer.py);
#   fp8peer  the same with --fp8: the stock FP8 peers of our FP8 GEMMs after each BF16 row
#          (torch._scaled_grouped_mm rowwise E4M3, dense torch._scaled_mm and BF16 torch.mm of the
#          op's size) and its FP8 check against a float reference (PASS/FAIL in the summary);
#   exp    bench_grouped_gemm again with DMOE_GEMM_EXPERIMENTAL=1 (heuristic rows only) and an A/B
#          table, default pick vs experimental pick (docs/perf_history.md G8-G10);
# then gemm_summary.txt: ours / cuBLAS, ours / torch per shape, routing and op, the targets, the
# geometric means of x torch, the sweep table (scripts/gpu_stages/gemm_tables.py).
# Files: gemm.log (the stage's console), gemm_summary.txt, gemm_ptxas_sass.txt, gemm_tests.log,
# gemm_bench.log, gemm_bench.csv, gemm_peer.log, gemm_bench_exp.log, gemm_fp8_peer.log,
# gemm_fp8_peer.csv; the CSVs also in $WORK, so a later call can run `peer` alone and still get the
# joined table.
#   GEMM_STEPS [ptxas tests bench peer]   the steps (exp, fp8peer: see above)
#   GEMM_SHAPES [all four]                --shapes, ours and the peer's (dsv3_prefill,dsv3_decode: quick)
#   GEMM_ROUTING [balanced,random,zipf]   --routing, ours and the peer's
#   GEMM_EP [2]                           per-rank sizes of an EP-N run (E/N local experts), both sides
#   GEMM_SWEEP [1]                        0: the heuristic's picks only
#   GEMM_SUSTAIN_MS [200]                 every timed call (ours, cuBLAS, torch) first runs this long
#       untimed: all at the sustained, power-limited clocks (docs/perf_history.md G22)
#   GEMM_TEST_TIMEOUT [1500]              seconds for the GEMM tests
#   GEMM_TEST_FILTER [GroupedGemm*]       their gtest filter (e.g. 'GroupedGemmFp8*' for the FP8 ones)
#   GEMM_BENCH_ARGS []                    more bench_grouped_gemm flags, e.g. an interleaved A/B of
#       configurations: "--ops w13_wgrad,w2_wgrad --rounds 5" (--sweep-match, --device-offsets, --sms ...)
# The short A/B of the experimental variants:
#   GEMM_STEPS="ptxas tests bench exp" GEMM_SHAPES=dsv3_prefill GEMM_TEST_TIMEOUT=240 DMOE_STAGES=gemm scripts/gpu_check.sh

stage_gemm() {
  local steps=${GEMM_STEPS:-ptxas tests bench peer} log="$OUT/gemm.log" rc
  local -a bench_args=() peer_args=() exp_args=()
  local -A result=([ptxas]=SKIP [sass]=SKIP [tests]=SKIP [bench]=SKIP [peer]=SKIP [exp]=SKIP [fp8peer]=SKIP)
  local py=${PYTHON:-python3} report="$OUT/gemm_ptxas_sass.txt" gsum="$OUT/gemm_summary.txt"
  want() { [[ " $steps " == *" $1 "* ]]; }
  if [ -n "${GEMM_SHAPES:-}" ]; then bench_args+=(--shapes "$GEMM_SHAPES"); peer_args+=(--shapes "$GEMM_SHAPES"); fi
  if [ -n "${GEMM_ROUTING:-}" ]; then bench_args+=(--routing "$GEMM_ROUTING"); peer_args+=(--routing "$GEMM_ROUTING"); fi
  if [ -n "${GEMM_EP:-}" ]; then bench_args+=(--ep "$GEMM_EP"); peer_args+=(--ep "$GEMM_EP"); fi
  bench_args+=(--sustain-ms "${GEMM_SUSTAIN_MS:-200}"); peer_args+=(--sustain-ms "${GEMM_SUSTAIN_MS:-200}")
  exp_args=("${bench_args[@]}")
  [ "${GEMM_SWEEP:-1}" = 1 ] && bench_args+=(--sweep)
  # shellcheck disable=SC2206  # extra flags are words
  bench_args+=(${GEMM_BENCH_ARGS:-})
  : > "$log"; : > "$gsum"
  x nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$WORK/gemm_gpu.txt" 2>&1

  if want ptxas; then
    echo "=== ptxas: registers, stack, spills; SASS: wgmma per GEMM kernel -> $report" >> "$log"
    # The report needs the GEMM objects to compile in this run.
    x touch src/gemm/grouped_gemm*.cu
    if build_targets gemm dist_moe_gemm dist_moe_gpu_tests bench_grouped_gemm; then
      if $py scripts/gemm_ptxas_report.py "$WORK/build_gemm.log" > "$report" 2>&1; then result[ptxas]=PASS; else result[ptxas]=FAIL; fi
      # Known and measured: the block-scaled swap-AB decode mainloop (mainloop_block_scaled_swap_ab.cuh)
      # with FP32 scales draws C7514/C7517 (a copy of one scratch set at the loop entry) and still
      # streams the weights at 97% of the copy rate (s21 r4, perf_history G49); every other C75xx
      # fails the step.
      local known="Sm90BlockScaledSwapABMainloop"
      if grep "C75[0-9][0-9]" "$WORK/build_gemm.log" | grep -vq "$known"; then
        { echo "ptxas performance warnings (C75xx):"; grep "C75[0-9][0-9]" "$WORK/build_gemm.log" | grep -v "$known" | sort -u | head -20; } >> "$report"
        result[ptxas]=FAIL
      fi
      grep -q "C75[0-9][0-9].*$known" "$WORK/build_gemm.log" &&
        echo "known C7514/C7517 in the block-scaled swap-AB kernels (perf_history G49)" >> "$report"
      if command -v cuobjdump > /dev/null && [ -f "$BUILD/libdist_moe_gemm.a" ]; then
        echo >> "$report"
        if cuobjdump -sass "$BUILD/libdist_moe_gemm.a" 2> /dev/null | $py scripts/gemm_ptxas_report.py --sass > "$WORK/gemm_sass.txt"; then
          result[sass]=PASS
        else
          result[sass]=FAIL
        fi
        cat "$WORK/gemm_sass.txt" >> "$report"
      else
        echo "cuobjdump or $BUILD/libdist_moe_gemm.a is missing" >> "$report"
      fi
      cat "$report" >> "$log"
    else
      result[ptxas]="FAIL(build)"
    fi
  elif want tests || want bench || want exp; then  # peer and fp8peer are Python only: no build
    build_targets gemm dist_moe_gpu_tests bench_grouped_gemm || return 1
  fi

  if want tests; then
    echo "=== GPU tests (GroupedGemm*) -> gemm_tests.log" >> "$log"
    x timeout "${GEMM_TEST_TIMEOUT:-1500}" "$BUILD/tests/dist_moe_gpu_tests" --gtest_filter="${GEMM_TEST_FILTER:-GroupedGemm*}" > "$OUT/gemm_tests.log" 2>&1
    rc=$?
    result[tests]=$([ $rc = 0 ] && echo PASS || echo "FAIL(rc=$rc)")
    local skipped
    skipped=$(grep -oE "^\[  SKIPPED \] [0-9]+ test" "$OUT/gemm_tests.log" | grep -oE "[0-9]+")
    [ -n "$skipped" ] && result[tests]="${result[tests]} ($skipped SKIPPED: $(grep -m1 'skipped: \|Skipped' "$OUT/gemm_tests.log"))"
    { grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]| FAIL$" "$OUT/gemm_tests.log" | tail -40
      echo "checks: $(grep -c ' PASS$' "$OUT/gemm_tests.log") PASS, $(grep -c ' FAIL$' "$OUT/gemm_tests.log") FAIL"; } >> "$log"
  fi

  if want bench; then
    echo "=== benchmark -> gemm_bench.log, gemm_bench.csv" >> "$log"
    rm -f "$WORK/gemm_bench.csv"
    x timeout 1500 "$BUILD/bench/bench_grouped_gemm" "${bench_args[@]}" --csv "$WORK/gemm_bench.csv" > "$OUT/gemm_bench.log" 2>&1
    rc=$?
    result[bench]=$([ $rc = 0 ] && echo RAN || echo "FAIL(rc=$rc)")
    [ -f "$WORK/gemm_bench.csv" ] && cp "$WORK/gemm_bench.csv" "$OUT/gemm_bench.csv"
    tail -5 "$OUT/gemm_bench.log" >> "$log"
  fi

  if want exp; then
    echo "=== benchmark with DMOE_GEMM_EXPERIMENTAL=1 (heuristic rows) -> gemm_bench_exp.log" >> "$log"
    rm -f "$WORK/gemm_bench_exp.csv"
    DMOE_GEMM_EXPERIMENTAL=1 DMOE_PRINT_GEMM_CONFIG=1 x timeout 600 "$BUILD/bench/bench_grouped_gemm" \
      "${exp_args[@]}" --csv "$WORK/gemm_bench_exp.csv" > "$OUT/gemm_bench_exp.log" 2>&1
    rc=$?
    result[exp]=$([ $rc = 0 ] && echo RAN || echo "FAIL(rc=$rc)")
    tail -3 "$OUT/gemm_bench_exp.log" >> "$log"
  fi

  # One torch peer step: step name, what it runs, its log, then the script's flags (CSV included).
  peer_step() {
    local step=$1 what=$2 plog=$3
    shift 3
    echo "=== $what -> $(basename "$plog")" >> "$log"
    x timeout 1500 "$py" bench/grouped_mm_peer.py "$@" > "$plog" 2>&1
    rc=$?
    result[$step]=$([ $rc = 0 ] && echo RAN || echo "FAIL(rc=$rc)")
    tail -3 "$plog" >> "$log"
  }
  if want peer; then
    rm -f "$WORK/gemm_peer.csv"
    peer_step peer "torch._grouped_mm peer" "$OUT/gemm_peer.log" "${peer_args[@]}" --csv "$WORK/gemm_peer.csv"
  fi
  if want fp8peer; then
    rm -f "$OUT/gemm_fp8_peer.csv"
    peer_step fp8peer "FP8 peers (torch._scaled_grouped_mm, _scaled_mm, dense BF16)" "$OUT/gemm_fp8_peer.log" \
      --fp8 "${peer_args[@]}" --fp8-csv "$OUT/gemm_fp8_peer.csv"
    grep -q "^FP8 check: FAIL" "$OUT/gemm_fp8_peer.log" 2> /dev/null && result[fp8peer]="${result[fp8peer]} (FP8 check FAIL)"
  fi

  $py scripts/gpu_stages/gemm_tables.py join "$WORK/gemm_bench.csv" "$WORK/gemm_peer.csv" >> "$gsum" 2>&1
  want exp && $py scripts/gpu_stages/gemm_tables.py ab "$WORK/gemm_bench.csv" "$WORK/gemm_bench_exp.csv" >> "$gsum" 2>&1
  {
    echo
    echo "=== grouped GEMM GPU check: summary ==="
    cat "$WORK/gemm_gpu.txt"
    printf '%-8s %s\n' ptxas "${result[ptxas]}" sass "${result[sass]}" tests "${result[tests]}" \
      bench "${result[bench]}" peer "${result[peer]}" exp "${result[exp]}" fp8peer "${result[fp8peer]}"
    want fp8peer && [ -f "$OUT/gemm_fp8_peer.log" ] && grep -E "^fp8 peer" "$OUT/gemm_fp8_peer.log"
    [ -f "$OUT/gemm_tests.log" ] && grep -E "^\[  FAILED  \]" "$OUT/gemm_tests.log" | head -20
    [ -f "$report" ] && tail -1 "$report"
  } > "$WORK/gemm_steps.txt"
  cat "$WORK/gemm_steps.txt" >> "$gsum"
  say "gemm (joined tables in gemm_summary.txt):"
  grep -E "^targets met|^geometric mean|^  [a-z0-9_]+ +[0-9.]+  over|^heuristic within" "$gsum" | tee -a "$SUMMARY"
  tail -n +3 "$WORK/gemm_steps.txt" | tee -a "$SUMMARY"
  [[ " ${result[*]} " != *FAIL* ]]
}
