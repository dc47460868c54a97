# shellcheck shell=bash
# Stages install, torch, torchbench of scripts/gpu_check.sh (sourced; see its header). The torch
# stages import the package `install` put in the environment when that stage runs, otherwise the
# modules the build leaves in python/dist_moe (built here when missing), so one call builds once.
#   TORCH_BENCH_SHAPES [qwen3_30b,dsv3_prefill,dsv3_decode]  torchbench: the shapes
#   TORCH_TESTS [tests/torch]          torch: the pytest paths (repo-relative, space-separated)
#   TORCH_EXAMPLES [bf16_training bf16_inference mxfp8_training block_scaled_inference]  torch: the torchrun examples

export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
TORCH_READY=""  # "", ok or failed: which package the torch stages import, decided once

stage_install() {
  local start
  start=$(date +%s)
  if x python -m pip install . > "$OUT/pip_install.log" 2>&1; then
    TORCH_READY=ok
    say "python -m pip install .: ok in $(( $(date +%s) - start )) s ($(cd /tmp && x python -c 'import dist_moe, dist_moe._C as c; print(dist_moe.__file__, "nccl", c.nccl_version())'))"
  else
    TORCH_READY=failed
    say "python -m pip install .: FAILED"; tail -30 "$OUT/pip_install.log" | tee -a "$SUMMARY"
    return 1
  fi
}

torch_package() {  # the installed package (stage install) or the in-place modules; 1 when neither
  if [ -z "$TORCH_READY" ]; then
    if build_targets torch dist_moe_native dist_moe_torch; then
      export PYTHONPATH=$ROOT/python
      TORCH_READY=ok
      say "using the in-place modules: $(ls python/dist_moe/_C*.so 2>/dev/null)"
    else
      TORCH_READY=failed
    fi
  fi
  [ "$TORCH_READY" = ok ]
}

stage_torch() {
  local rc fail=0 ex
  torch_package || return 1
  local paths=() p
  for p in ${TORCH_TESTS:-tests/torch}; do paths+=("$ROOT/$p"); done
  (cd /tmp && x timeout 1500 python -m pytest -q -p no:cacheprovider -rfE "${paths[@]}" > "$OUT/torch_tests.log" 2>&1)
  rc=$?; [ $rc = 0 ] || fail=1
  say "pytest ${TORCH_TESTS:-tests/torch} (rc=$rc): $(tail -1 "$OUT/torch_tests.log")"
  grep -E "^(FAILED|ERROR)" "$OUT/torch_tests.log" | head -20 | tee -a "$SUMMARY"
  (cd /tmp && x timeout 300 python -m pytest -q -p no:cacheprovider "$ROOT/tests/python" > "$OUT/python_tests.log" 2>&1)
  rc=$?; [ $rc = 0 ] || fail=1
  say "pytest tests/python against the package (rc=$rc): $(tail -1 "$OUT/python_tests.log")"
  : > "$OUT/examples.log"
  (cd /tmp && x python "$ROOT/examples/memory_planning.py" >> "$OUT/examples.log" 2>&1)
  rc=$?; [ $rc = 0 ] || fail=1
  say "examples/memory_planning.py: rc=$rc"
  for ex in ${TORCH_EXAMPLES:-bf16_training bf16_inference mxfp8_training block_scaled_inference}; do
    x timeout 300 torchrun --standalone --nproc-per-node="$NGPU" "examples/$ex.py" >> "$OUT/examples.log" 2>&1
    rc=$?; [ $rc = 0 ] || fail=1
    say "examples/$ex.py on $NGPU GPU(s): rc=$rc | $(grep -E "^$ex: OK|us/call" "$OUT/examples.log" | tail -2 | tr '\n' ' ')"
  done
  return $fail
}

stage_torchbench() {
  local rc
  torch_package || return 1
  x timeout 500 python bench/torch_layer_bench.py --shapes "${TORCH_BENCH_SHAPES:-qwen3_30b,dsv3_prefill,dsv3_decode}" \
    > "$OUT/torch_bench.log" 2>&1
  rc=$?
  say "bench/torch_layer_bench.py (rc=$rc):"; grep -A8 "torch front end vs" "$OUT/torch_bench.log" | tee -a "$SUMMARY" > /dev/null
  return $rc
}
