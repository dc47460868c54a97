# shellcheck shell=bash
# Stage comm of scripts/gpu_check.sh (sourced; see its header): the expert-parallel communication
# layer on two GPUs.
#   1. CPU routing-table tests (Routing*);
#   2. the comm correctness suite through dmoe_launch: 1 rank, then $COMM_RANKS ranks (bitwise vs the
#      oracle, CUDA-graph replays, T varying, every dispatch and combine mode);
#   3. failure scenarios (unequal T, capacity overflow, bad expert id, barrier timeout, the first three
#      again through the fused publish_route_dispatch kernel, pushed-scores mismatch): each must end
#      with its diagnostic line, a non-zero exit of the affected rank, and no illegal memory access;
#   4. the overflow scenario again under compute-sanitizer (memcheck);
#   5. bench_dispatch_combine (ours vs NVLink ceiling vs NCCL all-to-all; combine variants; fused
#      route; reduce(); phase traces; SM sweep; targets).
# Files: comm.log (the stage's console and its results table), comm_tests.log (1-2),
# comm_traps.log (3-4), comm_bench.log (5).
#   COMM_MODE [full]   quick: no SM sweep, dsv3_prefill and dsv3_decode only;
#                      ab: as quick, and only the multi-rank suite (no 1-rank suite, traps or
#                      sanitizer): the short A/B run of comm variants (~3 minutes)
#   COMM_RANKS [2]     ranks of the multi-rank suite, the traps and the benchmark

stage_comm() {
  local mode=${COMM_MODE:-full} nproc=${COMM_RANKS:-2} log="$OUT/comm.log" rc n sc first v
  local -x LD_LIBRARY_PATH="$NCCL_ROOT/lib:${LD_LIBRARY_PATH:-}"
  local all=dsv3_prefill,dsv3_decode,qwen3_30b,mixtral quick=dsv3_prefill,dsv3_decode
  local -a bench_args=(--shape "$all") order=() ranks=(1 "$nproc")
  local -A res=() detail=()
  put() { order+=("$1"); res[$1]=$2; detail[$1]=${3:-}; }
  case $mode in
    full) ;;
    quick) bench_args=(--shape "$quick" --no-sweep) ;;
    ab) bench_args=(--shape "$quick" --no-sweep); ranks=("$nproc") ;;
    *) say "comm: COMM_MODE=$mode is none of full, quick, ab"; return 2 ;;
  esac
  local launch="$BUILD/dmoe_launch" tests="$BUILD/tests/dist_moe_comm_tests"
  : > "$log"
  build_targets comm dmoe_launch dist_moe_comm_tests bench_dispatch_combine dist_moe_cpu_tests || return 1

  echo "=== CPU routing-table tests, comm suite at ${ranks[*]} rank(s) -> comm_tests.log" >> "$log"
  x "$BUILD/tests/dist_moe_cpu_tests" --gtest_filter='Routing*' > "$OUT/comm_tests.log" 2>&1
  rc=$?
  put cpu_routing_tables "$([ $rc = 0 ] && echo PASS || echo FAIL)" "$(grep -E '^\[  (PASSED|FAILED)' "$OUT/comm_tests.log" | head -2 | tr '\n' ' ')"
  for n in "${ranks[@]}"; do
    echo "##### dmoe_launch -n $n" >> "$OUT/comm_tests.log"
    x "$launch" -n "$n" --timeout 900 -- "$tests" > "$WORK/comm_suite.log" 2>&1
    rc=$?
    cat "$WORK/comm_suite.log" >> "$OUT/comm_tests.log"
    first=$(grep -E "ALL PASS|SOME FAILED|SKIP" "$WORK/comm_suite.log" | head -1)
    if [ $rc = 0 ] && { [ "$DRY_RUN" = 1 ] || grep -q "ALL PASS" "$WORK/comm_suite.log"; }; then v=PASS; else v="FAIL(rc=$rc)"; fi
    put "comm_suite_${n}rank" "$v" "$first"
    grep -E "^\[rank 0\] (PASS|FAIL) |FAIL " "$WORK/comm_suite.log" | head -60 >> "$log"
  done

  local -a common=(--timeout 300 --grace 60 --forbid-output "illegal memory access" --forbid-output "misaligned address"
                   --forbid-output "UNEXPECTED")
  scenario_args() {
    case $1 in
      unequal_t*) echo "--expect-fail 0 --expect-fail 1" ;;
      *) echo "--expect-fail 0" ;;
    esac
  }
  scenario_text() {
    case $1 in
      unequal_t*) echo "*:DistMoE token count mismatch" ;;
      overflow*) echo "0:DistMoE scratch capacity exceeded: rank 0 required_receive_rows: 128 total_scratch_capacity_rows: 16" ;;
      bad_id*) echo "0:DistMoE expert ID is outside [-1, num_experts)" ;;
      timeout) echo "0:DistMoE timeout: rank 0" ;;
      scores_mismatch) echo "0:DistMoE protocol error: rank 0 runs the rank-partials combine of call 1 with pushed scores" ;;
    esac
  }
  echo "=== failure scenarios, sanitizer -> comm_traps.log" >> "$log"
  if [ "$mode" = ab ]; then
    put traps SKIP "COMM_MODE=ab"
    put sanitizer_overflow SKIP "COMM_MODE=ab"
  else
    : > "$OUT/comm_traps.log"
    for sc in unequal_t overflow bad_id timeout unequal_t_fused overflow_fused bad_id_fused scores_mismatch; do
      echo "##### scenario $sc" >> "$OUT/comm_traps.log"
      # shellcheck disable=SC2046
      x "$launch" -n "$nproc" "${common[@]}" $(scenario_args $sc) --expect-output "$(scenario_text $sc)" \
        -- "$tests" --case "$sc" >> "$OUT/comm_traps.log" 2>&1
      rc=$?
      put "trap_$sc" "$([ $rc = 0 ] && echo PASS || echo FAIL)" "$(scenario_text $sc | cut -d: -f2- | cut -c1-60)"
    done
    grep -E "^##### |DistMoE|\[launcher\] (expectation|PASS|FAIL)" "$OUT/comm_traps.log" | head -100 >> "$log"
    if command -v compute-sanitizer > /dev/null || [ "$DRY_RUN" = 1 ]; then
      echo "##### overflow under compute-sanitizer (memcheck)" >> "$OUT/comm_traps.log"
      x "$launch" -n "$nproc" --timeout 900 --grace 300 --expect-fail 0 --expect-output "$(scenario_text overflow)" \
        --forbid-output "illegal memory access" --forbid-output "Invalid __global__" --forbid-output "Invalid __shared__" \
        --forbid-output "out of bounds" --forbid-output "misaligned address" \
        -- compute-sanitizer --tool memcheck --print-limit 50 "$tests" --case overflow > "$WORK/comm_sanitizer.log" 2>&1
      rc=$?
      cat "$WORK/comm_sanitizer.log" >> "$OUT/comm_traps.log"
      put sanitizer_overflow "$([ $rc = 0 ] && echo PASS || echo FAIL)" \
        "$(grep -E 'ERROR SUMMARY' "$WORK/comm_sanitizer.log" | head -2 | tr '\n' ' ')"
      grep -E "DistMoE|ERROR SUMMARY|Invalid|\[launcher\] (expectation|PASS|FAIL)" "$WORK/comm_sanitizer.log" | head -30 >> "$log"
    else
      put sanitizer_overflow SKIP "compute-sanitizer not found"
    fi
  fi

  echo "=== benchmark -> comm_bench.log" >> "$log"
  x "$launch" -n "$nproc" --timeout 1500 -- "$BUILD/bench/bench_dispatch_combine" "${bench_args[@]}" > "$OUT/comm_bench.log" 2>&1
  rc=$?
  put bench "$([ $rc = 0 ] && echo RAN || echo "FAIL(rc=$rc)")" ""
  local line
  while IFS= read -r line; do
    case $line in
      "[rank 0] PASS "*) put "target: ${line#\[rank 0\] PASS }" PASS "" ;;
      "[rank 0] FAIL "*) put "target: ${line#\[rank 0\] FAIL }" FAIL "" ;;
    esac
  done < <(grep -E "^\[rank 0\] (PASS|FAIL) " "$OUT/comm_bench.log")

  {
    echo
    echo "==================== comm GPU check: results ===================="
    sed -n '/==== bench_dispatch_combine/,$p' "$OUT/comm_bench.log" | sed 's/^\[rank 0\] //' | grep -v "^\[launcher\]"
    echo
  } >> "$log"
  say "comm (COMM_MODE=$mode; the benchmark's tables in comm.log):"
  {
    printf '%-72s %-8s %s\n' "step" "result" "detail"
    for n in "${order[@]}"; do printf '%-72s %-8s %s\n' "${n:0:72}" "${res[$n]}" "${detail[$n]}"; done
  } | tee -a "$log" | tee -a "$SUMMARY"
  [[ " ${res[*]} " != *FAIL* ]]
}
