# shellcheck shell=bash
# Stages tests, pipeline, mxfp8, fp8bw, nvfp4, mega, quant, bench of scripts/gpu_check.sh (sourced; see its header).
#   DMOE_BENCH_SHAPES [dsv3_prefill qwen3_30b mixtral]  bench: the train shapes (dsv3_decode runs infer)
#   DMOE_BENCH_FORMAT [bf16]  bench: mxfp8 | fp8_blockwise | nvfp4 runs that layer against our BF16 layer
#     (--no-baseline --iters 10 --sustain-ms 50, DMOE_BENCH_MODE [infer] for every shape of
#     DMOE_BENCH_SHAPES [dsv3_decode dsv3_prefill qwen3_30b]) and keeps each shape's ratio and GEMM
#     stage lines in the summary.
#   DMOE_BENCH_TOKENS [the shape's own]  bench with a format: each shape at each of these tokens per
#     rank (`--tokens T`; e.g. "256 512 1024" for the mid-sized batches, perf.md).
#   DMOE_BENCH_PIPELINE [staged]  bench with a format: mega runs the Mega layer, the staged layer of
#     the format alternated with it (`--pipeline mega`; its "staged layer" line kept in the summary).

stage_tests() {
  build_targets tests dist_moe_gpu_tests || return 1
  x "$BUILD/tests/dist_moe_gpu_tests" --gtest_color=no > "$OUT/gpu_tests.log" 2>&1
  local rc=$?
  say "gpu tests (rc=$rc): $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|tests? ran' "$OUT/gpu_tests.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \]" "$OUT/gpu_tests.log" | head -20 | tee -a "$SUMMARY"
  return $rc
}

stage_pipeline() {
  local rc fail=0
  build_targets pipeline dmoe_launch dist_moe_pipeline_tests two_layer_moe || return 1
  x timeout 900 "$BUILD/dmoe_launch" -n "$NGPU" --timeout 800 -- "$BUILD/tests/dist_moe_pipeline_tests" > "$OUT/pipeline.log" 2>&1
  rc=$?; [ $rc = 0 ] || fail=1
  say "pipeline tests (rc=$rc): $(grep -E 'ALL PASS|FAILED:|ERROR' "$OUT/pipeline.log" | head -4 | tr '\n' ' ')"
  grep -E "FAIL case" "$OUT/pipeline.log" | head -10 | tee -a "$SUMMARY"
  x timeout 300 "$BUILD/dmoe_launch" -n "$NGPU" --timeout 250 -- "$BUILD/examples/two_layer_moe" >> "$OUT/pipeline.log" 2>&1
  rc=$?; [ $rc = 0 ] || fail=1
  say "two-layer example (rc=$rc): $(grep -E 'two-layer MoE' "$OUT/pipeline.log" | tr '\n' ' ')"
  x timeout 400 ctest --test-dir "$BUILD" -R pipeline_trap --output-on-failure >> "$OUT/pipeline.log" 2>&1
  rc=$?; [ $rc = 0 ] || fail=1
  say "pipeline trap tests (rc=$rc): $(grep -E 'tests passed|tests failed' "$OUT/pipeline.log" | tail -1)"
  return $fail
}

# A block-scaled layer suite on every GPU, then its one-GPU trap tests (ctest -R <traps>_trap; none
# when <traps> is empty): <stage> <suite target> <label> <traps>.
run_block_scaled_suite() {
  local stage=$1 target=$2 label=$3 traps=$4 rc fail=0
  build_targets "$stage" dmoe_launch "$target" || return 1
  x timeout 900 "$BUILD/dmoe_launch" -n "$NGPU" --timeout 800 -- "$BUILD/tests/$target" > "$OUT/$stage.log" 2>&1
  rc=$?; [ $rc = 0 ] || fail=1
  say "$label pipeline tests (rc=$rc): $(grep -E 'ALL PASS|FAILED:|ERROR' "$OUT/$stage.log" | head -4 | tr '\n' ' ')"
  grep -E "FAIL case" "$OUT/$stage.log" | head -10 | tee -a "$SUMMARY"
  [ -n "$traps" ] || return $fail
  x timeout 300 ctest --test-dir "$BUILD" -R "${traps}_trap" --output-on-failure >> "$OUT/$stage.log" 2>&1
  rc=$?; [ $rc = 0 ] || fail=1
  say "$label trap tests (rc=$rc): $(grep -E 'tests passed|tests failed' "$OUT/$stage.log" | tail -1)"
  return $fail
}

# The MXFP8 staged layer suite (dist_moe_mxfp8_pipeline_tests).
stage_mxfp8() { run_block_scaled_suite mxfp8 dist_moe_mxfp8_pipeline_tests mxfp8 mxfp8; }

# The FP8-blockwise layer suites: inference (dist_moe_fp8_blockwise_pipeline_tests, fp8bw.log) and
# training (dist_moe_fp8_blockwise_training_tests, fp8bw_train.log).
stage_fp8bw() {
  local fail=0
  run_block_scaled_suite fp8bw dist_moe_fp8_blockwise_pipeline_tests fp8_blockwise fp8_blockwise || fail=1
  run_block_scaled_suite fp8bw_train dist_moe_fp8_blockwise_training_tests "fp8_blockwise training" "" || fail=1
  return $fail
}

# The NVFP4 inference layer suite (dist_moe_nvfp4_pipeline_tests, nvfp4.log) and its traps.
stage_nvfp4() { run_block_scaled_suite nvfp4 dist_moe_nvfp4_pipeline_tests nvfp4 nvfp4; }

# The Mega pipeline's tests alone (mega.log): the `Mega*` GPU tests and the emulated-peer Mega cases,
# the MXFP8 and NVFP4 layer suites' Mega cases (`--filter mega`: 147 s for the MXFP8 ones on an H100,
# s51), and tests/torch/test_mega.py on the in-place modules (torch.sh's torch_package).
stage_mega() {
  local rc fail=0 t
  build_targets mega dist_moe_gpu_tests dmoe_launch dist_moe_mxfp8_pipeline_tests dist_moe_nvfp4_pipeline_tests ||
    return 1
  : > "$OUT/mega.log"
  DMOE_COMM_TIMEOUT_MS=10000 x timeout 300 "$BUILD/tests/dist_moe_gpu_tests" --gtest_color=no \
    --gtest_filter='Mega*:*EmulatedPeers*mega*' >> "$OUT/mega.log" 2>&1
  rc=$?; [ $rc = 0 ] || fail=1
  say "mega GPU tests (rc=$rc): $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$OUT/mega.log" | tr '\n' ' ')"
  for t in mxfp8 nvfp4; do
    x timeout 700 "$BUILD/dmoe_launch" -n "$NGPU" --timeout 600 -- "$BUILD/tests/dist_moe_${t}_pipeline_tests" \
      --filter mega >> "$OUT/mega.log" 2>&1
    rc=$?; [ $rc = 0 ] || fail=1
    say "$t suite, mega cases (rc=$rc): $(grep -E 'ALL PASS|FAILED:|FAIL case' "$OUT/mega.log" | tail -1)"
  done
  if torch_package; then
    x timeout 300 python3 -m pytest -q tests/torch/test_mega.py >> "$OUT/mega.log" 2>&1
    rc=$?; [ $rc = 0 ] || fail=1
    say "torch test_mega.py (rc=$rc): $(tail -1 "$OUT/mega.log")"
  else
    fail=1
  fi
  return $fail
}

# A hook for the quantization kernels: runs what is built, says what is not.
stage_quant() {
  local rc fail=0 ran=0
  : > "$OUT/quant.log"
  if [ -x "$BUILD/bench/bench_quantize" ] || [ "$DRY_RUN" = 1 ]; then
    x timeout 600 "$BUILD/bench/bench_quantize" >> "$OUT/quant.log" 2>&1
    rc=$?; [ $rc = 0 ] || fail=1; ran=1
    say "quant: bench_quantize (rc=$rc)"; tail -8 "$OUT/quant.log" | tee -a "$SUMMARY" > /dev/null
  else
    say "quant: no $BUILD/bench/bench_quantize (not built in this tree): skipped"
  fi
  if [ -x "$BUILD/tests/dist_moe_gpu_tests" ] || [ "$DRY_RUN" = 1 ]; then
    echo "##### dist_moe_gpu_tests --gtest_filter='Quantize*:SwigluBackwardQuantize*'" >> "$OUT/quant.log"
    x timeout 900 "$BUILD/tests/dist_moe_gpu_tests" --gtest_color=no --gtest_filter='Quantize*:SwigluBackwardQuantize*' \
      > "$WORK/quant_tests.log" 2>&1
    rc=$?
    cat "$WORK/quant_tests.log" >> "$OUT/quant.log"
    if grep -qE "^\[==========\] 0 tests" "$WORK/quant_tests.log"; then
      say "quant: no Quantize* / SwigluBackwardQuantize* GPU tests in this tree: skipped"
    else
      [ $rc = 0 ] || fail=1; ran=1
      say "quant: Quantize* + SwigluBackwardQuantize* GPU tests (rc=$rc): $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$WORK/quant_tests.log" | tr '\n' ' ')"
      grep -E "^\[  FAILED  \]" "$WORK/quant_tests.log" | head -20 | tee -a "$SUMMARY"
    fi
  else
    say "quant: no $BUILD/tests/dist_moe_gpu_tests (run the build stage first): skipped"
  fi
  [ $ran = 1 ] || { rm -f "$OUT/quant.log"; return 77; }
  return $fail
}

# One block-scaled format against our BF16 layer, per shape (stage_bench with DMOE_BENCH_FORMAT).
bench_format() {
  local rc fail=0 shape fmt=$1 mode=${DMOE_BENCH_MODE:-infer} log="$WORK/bench_shape.log"
  local pipeline=${DMOE_BENCH_PIPELINE:-staged} tokens t
  for shape in ${DMOE_BENCH_SHAPES:-dsv3_decode dsv3_prefill qwen3_30b}; do
    for t in ${DMOE_BENCH_TOKENS:-own}; do
      tokens=(); [ "$t" = own ] || tokens=(--tokens "$t")
      x timeout 300 "$BUILD/dist-moe" bench --shape "$shape" "${tokens[@]}" --mode "$mode" --format "$fmt" --no-baseline \
        --iters 10 --sustain-ms 50 --pipeline "$pipeline" > "$log" 2>&1
      rc=$?; [ $rc = 0 ] || fail=1
      cat "$log" >> "$OUT/bench.log"
      say "bench $shape ${tokens[*]} $fmt $mode $pipeline (rc=$rc)"
      grep -E "^fwd:w13 |^fwd:w2 |^fwd:mega |^inference forward|^forward|BF16 layer|staged layer" "$log" | tee -a "$SUMMARY" > /dev/null
    done
  done
  return $fail
}

stage_bench() {
  local rc fail=0 shape
  build_targets bench dist-moe || return 1
  if [ "${DMOE_BENCH_FORMAT:-bf16}" != bf16 ]; then bench_format "$DMOE_BENCH_FORMAT"; return $?; fi
  for shape in ${DMOE_BENCH_SHAPES:-dsv3_prefill qwen3_30b mixtral}; do
    x timeout 600 "$BUILD/dist-moe" bench --shape "$shape" --mode train --iters 10 >> "$OUT/bench.log" 2>&1
    rc=$?; [ $rc = 0 ] || fail=1
    say "bench $shape train (rc=$rc)"; tail -6 "$OUT/bench.log" | tee -a "$SUMMARY" > /dev/null
  done
  x timeout 300 "$BUILD/dist-moe" bench --shape dsv3_decode --mode infer --iters 20 >> "$OUT/bench.log" 2>&1
  rc=$?; [ $rc = 0 ] || fail=1
  say "bench dsv3_decode infer (rc=$rc)"; tail -5 "$OUT/bench.log" | tee -a "$SUMMARY" > /dev/null
  return $fail
}
