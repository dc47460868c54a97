# shellcheck shell=bash
# Stages delay, contention, ncu of scripts/gpu_check.sh (sourced; see its header): ordering checks
# of the BF16 pipeline between ranks (docs/pipeline.md) and Nsight Compute on chosen GEMM kernels.
#   delay       runs a multi-rank program once per (rank, stage) with DMOE_DEBUG_STAGE_DELAY making that
#               rank DELAY_US late after that stage; a correct pipeline gives the same results however
#               late any rank is anywhere. One PASS/FAIL line per run in delay.log.
#     DELAY_PROGRAM [$BUILD_DIR/examples/two_layer_moe]  DELAY_RANKS [2]  DELAY_US [2000]
#     DELAY_STAGES [* and every stage the pipeline names]
#   contention  the two-layer example (CONTENTION_RUNS times) and the pipeline suite (twice) while
#               the comm suite loops on the same GPUs in another process: ordering bugs that quiet
#               timing hides show up as wrong results. contention.log.
#     CONTENTION_RANKS [2]  CONTENTION_RUNS [8]
#   ncu         Nsight Compute on one launch (the third match) of each kernel in NCU_KERNELS inside a
#               bench_grouped_gemm run of NCU_OPS at NCU_SHAPE (balanced, --sweep so every
#               configuration launches): speed of light, memory, compute, warp states, scheduler,
#               launch, occupancy, source counters and every pc-sampling stall reason; then the
#               SASS of each profiled kernel; NCU_CUBLAS=1 adds cuBLAS's strided-batched kernel at
#               the same per-expert GEMMs. Files: ncu.txt, ncu_sass.txt; the key metrics in the summary.
#     NCU_KERNELS (required)  label=regex pairs separated by ';', over demangled kernel names
#         (`nm -C $BUILD_DIR/libdist_moe_gemm.a | grep MainloopConfig` shows them: the mainloop's
#         MainloopConfig<(dist_moe::gemm::GemmKind)K, (int)BM, (int)BN, (int)stages,
#         (...ConsumerSchedule)S, (...WeightSplit)W, (int)cluster, operands>; kind 0 FPROP, 1 DGRAD,
#         2 WGRAD, 3 swap-AB decode; the integers print with their "(int)" casts, s29 r5)
#     NCU_NAME_BASE [demangled]  what the regexes match: demangled, mangled or function
#     NCU_SHAPE [dsv3_prefill]  NCU_OPS [w13_wgrad]  NCU_CUBLAS [0]
#   The BF16 WGRAD cooperative 128x256 kernels at dsv3_prefill, and cuBLAS:
#     NCU_KERNELS='coop=GemmKind\)2, \(int\)128, \(int\)256, \(int\)4, \(dist_moe::gemm::ConsumerSchedule\)0' NCU_CUBLAS=1 \
#       DMOE_STAGES="build ncu" scripts/gpu_check.sh

# One run of the delay / contention checks: PASS, or FAIL with the first diagnostic lines.
order_check() {  # log label command...
  local log=$1 label=$2 rc; shift 2
  echo "##### $label" >> "$log"
  x timeout 300 "$@" > "$WORK/order_run.log" 2>&1
  rc=$?
  cat "$WORK/order_run.log" >> "$log"
  if [ $rc = 0 ]; then ORDER_PASS=$((ORDER_PASS + 1)); echo "PASS $label" >> "$log"; else
    ORDER_FAIL=$((ORDER_FAIL + 1))
    echo "FAIL $label (rc=$rc): $(grep -E 'MISMATCH|FAIL|DistMoE|error' "$WORK/order_run.log" | head -3 | tr '\n' ' ' | cut -c1-300)" |
      tee -a "$log" | tee -a "$SUMMARY"
  fi
}

stage_delay() {
  local nproc=${DELAY_RANKS:-2} us=${DELAY_US:-2000} program=${DELAY_PROGRAM:-$BUILD/examples/two_layer_moe} r st
  local stages=${DELAY_STAGES:-"* publish+route plan w13 w2 reduce h2_from_saved_h1 topk_backward w2_dgrad w2_wgrad swiglu_backward grad_x_barrier w13_dgrad w13_wgrad reduce_grad_x recompute_w13 recompute_w2"}
  build_targets delay dmoe_launch two_layer_moe || return 1
  : > "$OUT/delay.log"
  ORDER_PASS=0 ORDER_FAIL=0
  order_check "$OUT/delay.log" "no delay" "$BUILD/dmoe_launch" -n "$nproc" --timeout 240 -- "$program"
  local -a words
  read -r -a words <<< "$stages"  # the stage "*" is a word, not a glob
  for r in $(seq 0 $((nproc - 1))); do
    for st in "${words[@]}"; do
      DMOE_DEBUG_STAGE_DELAY="$r:$st:$us" order_check "$OUT/delay.log" "rank $r late after $st" \
        "$BUILD/dmoe_launch" -n "$nproc" --timeout 240 -- "$program"
    done
  done
  say "stage delay sweep: $ORDER_PASS passed, $ORDER_FAIL failed (delay $us us, $nproc ranks, $(basename "$program"))"
  [ "$ORDER_FAIL" = 0 ]
}

stage_contention() {
  local nproc=${CONTENTION_RANKS:-2} runs=${CONTENTION_RUNS:-8} i flag loader launch="$BUILD/dmoe_launch"
  build_targets contention dmoe_launch two_layer_moe dist_moe_pipeline_tests dist_moe_comm_tests || return 1
  : > "$OUT/contention.log"
  ORDER_PASS=0 ORDER_FAIL=0
  flag=$(mktemp)
  ( while [ -e "$flag" ]; do x "$launch" -n "$nproc" --timeout 300 -- "$BUILD/tests/dist_moe_comm_tests" > /dev/null 2>&1
      [ "$DRY_RUN" = 1 ] && break; done ) &
  loader=$!
  sleep 2
  for i in $(seq 1 "$runs"); do
    order_check "$OUT/contention.log" "two-layer example, run $i" "$launch" -n "$nproc" --timeout 240 -- "$BUILD/examples/two_layer_moe"
  done
  for i in 1 2; do
    order_check "$OUT/contention.log" "pipeline suite, run $i" "$launch" -n "$nproc" --timeout 280 -- "$BUILD/tests/dist_moe_pipeline_tests"
  done
  rm -f "$flag"
  wait "$loader"
  say "contention check: $ORDER_PASS passed, $ORDER_FAIL failed ($runs example runs + 2 pipeline suites beside a comm-suite loop)"
  [ "$ORDER_FAIL" = 0 ]
}

stage_ncu() {
  local shape=${NCU_SHAPE:-dsv3_prefill} ops=${NCU_OPS:-w13_wgrad} bench="$BUILD/bench/bench_grouped_gemm" pair label regex
  local reasons="" r name fail=0 rc
  [ -n "${NCU_KERNELS:-}" ] || { say "ncu: set NCU_KERNELS (label=regex over demangled kernel names)"; return 2; }
  build_targets ncu bench_grouped_gemm || return 1
  for r in barrier long_scoreboard wait math_pipe_throttle membar sleeping mio_throttle short_scoreboard selected \
           dispatch_stall no_instructions misc lg_throttle drain branch_resolving; do
    reasons+="${reasons:+,}smsp__pcsamp_warps_issue_stalled_$r"
  done
  local -a sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis
                     --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy
                     --section SourceCounters --metrics "$reasons")
  : > "$OUT/ncu.txt"; : > "$OUT/ncu_sass.txt"
  local -a pairs
  IFS=';' read -r -a pairs <<< "$NCU_KERNELS"
  for pair in "${pairs[@]}"; do
    [ -n "$pair" ] || continue
    label=${pair%%=*}
    regex=${pair#*=}
    echo "##### ncu $label: $regex" >> "$OUT/ncu.txt"
    x timeout 200 ncu --clock-control none --kernel-name-base "${NCU_NAME_BASE:-demangled}" --print-kernel-base mangled -k "regex:$regex" \
      --launch-skip 2 --launch-count 1 "${sections[@]}" \
      "$bench" --shapes "$shape" --routing balanced --ops "$ops" --sweep --iters 3 > "$WORK/ncu_one.txt" 2>&1
    rc=$?; [ $rc = 0 ] || fail=1
    cat "$WORK/ncu_one.txt" >> "$OUT/ncu.txt"
    say "ncu $label (rc=$rc): $(grep -cE '^ +[A-Z]' "$WORK/ncu_one.txt") metric lines"
    grep -E "^  [a-z_].*\(|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Dynamic Shared|Issued Ipc|Executed Ipc A|Warp Cycles Per Issued|Tensor|Block Size|Grid Size|L1/TEX Hit|L2 Hit" \
      "$WORK/ncu_one.txt" | head -30 >> "$SUMMARY"
    grep -E "^    Stall |smsp__pcsamp_warps_issue_stalled" "$WORK/ncu_one.txt" | sort -k3 -rn | head -8 >> "$SUMMARY"
    name=$(grep -oE '^  _Z[^ (]+' "$WORK/ncu_one.txt" | head -1 | tr -d ' ')
    if [ -n "$name" ]; then
      echo "##### sass $label: $name" >> "$OUT/ncu_sass.txt"
      cuobjdump -sass -fun "$name" "$BUILD/libdist_moe_gemm.a" >> "$OUT/ncu_sass.txt" 2>&1
    fi
  done
  if [ "${NCU_CUBLAS:-0}" = 1 ]; then
    echo "##### ncu cublas" >> "$OUT/ncu.txt"
    x timeout 150 ncu --clock-control none --kernel-name-base function -k "regex:nvjet|xmma|cutlass" --launch-skip 14 \
      --launch-count 1 "${sections[@]}" "$bench" --shapes "$shape" --routing balanced --ops "$ops" --iters 3 \
      > "$WORK/ncu_one.txt" 2>&1
    rc=$?; [ $rc = 0 ] || fail=1
    cat "$WORK/ncu_one.txt" >> "$OUT/ncu.txt"
    say "ncu cublas (rc=$rc)"
  fi
  [ -s "$OUT/ncu_sass.txt" ] || rm -f "$OUT/ncu_sass.txt"
  return $fail
}
