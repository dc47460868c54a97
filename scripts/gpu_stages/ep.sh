# shellcheck shell=bash
# Stage ep of scripts/gpu_check.sh (sourced; see its header): EP validation and scaling (issue #8) on
# a machine with several GPUs (kinds nvidia-h200-x2/-x4/-x8). For every EP size in $EP_SIZES
# (smaller sizes run on the first GPUs):
#   suites  the communication suite, the BF16 pipeline suite and the two-layer example through
#           dmoe_launch -n N                                                      ep_suites.log
#   torch   tests/torch/test_two_rank.py with DMOE_TEST_RANKS=N (the package as the torch stage
#           finds it)                                                             ep_torch.log
#   bench   `dist-moe bench --gpus N` on $EP_SHAPES (train; dsv3_decode: infer)   ep_layer_bench.log
#           and bench_dispatch_combine for dsv3_prefill and dsv3_decode           ep_comm_bench.log
#   plot    scripts/plot_scaling.py over every layer-bench section: the markdown table (time per layer
#           against EP size) and the chart (copy it to docs/ with the table in perf.md)  scaling.md scaling.svg
# The full set takes longer than one 10-minute device call at EP8: split it, e.g.
#   EP_STEPS=suites DMOE_STAGES="build ep" scripts/gpu_check.sh
#   EP_STEPS="bench plot" EP_SIZES="4 8" EP_SHAPES="dsv3_prefill qwen3_30b" DMOE_STAGES="build ep" scripts/gpu_check.sh
#   EP_STEPS [suites bench plot]
#   EP_SIZES [2 4 8, up to the GPUs present]
#   EP_SHAPES [dsv3_prefill qwen3_30b mixtral dsv3_decode]

stage_ep() {
  local steps=${EP_STEPS:-suites bench plot} sizes=${EP_SIZES:-} shapes=${EP_SHAPES:-dsv3_prefill qwen3_30b mixtral dsv3_decode}
  local -x LD_LIBRARY_PATH="$NCCL_ROOT/lib:${LD_LIBRARY_PATH:-}"
  local launch="$BUILD/dmoe_launch" n t rc fail=0 shape mode
  want() { [[ " $steps " == *" $1 "* ]]; }
  gpus_for() { seq -s, 0 $(( $1 - 1 )); }  # dmoe_launch gives rank r GPU r of the visible ones
  if [ -z "$sizes" ]; then
    for n in 2 4 8; do [ "$n" -le "$NGPU" ] && sizes="$sizes $n"; done
  fi
  say "ep: $NGPU GPU(s), EP sizes:$sizes, steps: $steps"
  build_targets ep dmoe_launch dist_moe_comm_tests dist_moe_pipeline_tests bench_dispatch_combine two_layer_moe dist-moe ||
    return 1

  if want suites; then
    : > "$OUT/ep_suites.log"
    for n in $sizes; do
      for t in comm pipeline; do
        echo "##### $t suite, EP$n" >> "$OUT/ep_suites.log"
        CUDA_VISIBLE_DEVICES=$(gpus_for "$n") x timeout 900 "$launch" -n "$n" --timeout 800 -- \
          "$BUILD/tests/dist_moe_${t}_tests" >> "$OUT/ep_suites.log" 2>&1
        rc=$?; [ $rc = 0 ] || fail=1
        say "EP$n $t suite (rc=$rc): $(grep -A100000 "##### $t suite, EP$n" "$OUT/ep_suites.log" |
          grep -E '^\[rank 0\] (\[rank 0\] )?(ALL PASS|SOME FAILED)' | head -1)"  # the pipeline suite prefixes its own rank
      done
      echo "##### two-layer example, EP$n" >> "$OUT/ep_suites.log"
      CUDA_VISIBLE_DEVICES=$(gpus_for "$n") x timeout 300 "$launch" -n "$n" --timeout 250 -- \
        "$BUILD/examples/two_layer_moe" >> "$OUT/ep_suites.log" 2>&1
      rc=$?; [ $rc = 0 ] || fail=1
      say "EP$n two-layer example (rc=$rc)"
    done
  fi

  if want torch; then
    if torch_package; then
      : > "$OUT/ep_torch.log"
      for n in $sizes; do
        echo "##### tests/torch/test_two_rank.py, EP$n" >> "$OUT/ep_torch.log"
        (cd /tmp && DMOE_TEST_RANKS=$n CUDA_VISIBLE_DEVICES=$(gpus_for "$n") x timeout 1200 python -m pytest -q \
           -p no:cacheprovider -rfE "$ROOT/tests/torch/test_two_rank.py" >> "$OUT/ep_torch.log" 2>&1)
        rc=$?; [ $rc = 0 ] || fail=1
        say "EP$n torch suite (rc=$rc): $(tail -1 "$OUT/ep_torch.log")"
      done
    else
      fail=1
    fi
  fi

  if want bench; then
    for n in $sizes; do
      for shape in $shapes; do
        mode=train
        [ "$shape" = dsv3_decode ] && mode=infer
        x timeout 900 "$BUILD/dist-moe" bench --shape "$shape" --mode "$mode" --gpus "$n" --iters 10 \
          >> "$OUT/ep_layer_bench.log" 2>&1
        rc=$?; [ $rc = 0 ] || fail=1
        # The ratios of this bench's own section (the last one in the log).
        say "EP$n bench $shape $mode (rc=$rc): $(awk '/^dist-moe bench: /{s=""} {s=s $0 "\n"} END{printf "%s", s}' \
          "$OUT/ep_layer_bench.log" | grep -E '^(forward|forward\+backward|inference forward) ' |
          awk '{print $1, $(NF)}' | tr '\n' ' ')"
      done
      echo "##### bench_dispatch_combine, EP$n" >> "$OUT/ep_comm_bench.log"
      CUDA_VISIBLE_DEVICES=$(gpus_for "$n") x timeout 600 "$launch" -n "$n" --timeout 500 -- \
        "$BUILD/bench/bench_dispatch_combine" --shape dsv3_prefill,dsv3_decode --no-sweep >> "$OUT/ep_comm_bench.log" 2>&1
      rc=$?; [ $rc = 0 ] || fail=1
      say "EP$n bench_dispatch_combine (rc=$rc)"
      grep -A100000 "##### bench_dispatch_combine, EP$n" "$OUT/ep_comm_bench.log" | grep -E "^\[rank 0\] (PASS|FAIL) " |
        sed "s/^\[rank 0\]/  EP$n/" | tee -a "$SUMMARY" > /dev/null
    done
  fi

  if want plot; then
    if [ -s "$OUT/ep_layer_bench.log" ]; then
      python3 scripts/plot_scaling.py "$OUT/ep_layer_bench.log" --svg "$OUT/scaling.svg" > "$OUT/scaling.md"
      rc=$?; [ $rc = 0 ] || fail=1
      say "scaling table: scaling.md, chart: scaling.svg"
      cat "$OUT/scaling.md" >> "$SUMMARY"
    else
      say "ep plot: no layer bench log in $OUT (run the bench step in the same call)"
    fi
  fi
  return $fail
}
