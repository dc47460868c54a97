#!/usr/bin/env bash
# On the GPU machine: configure (NCCL from the torch venv), build everything with all cores, run
# the GPU test suites and the benchmarks named in $DMOE_STAGES, write logs to $OUT and print a
# short table last. Stages: env build tests pipeline bench treeab gemm comm ep (default: env build tests).
#   DMOE_STAGES="build tests gemm" scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/dmoe-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
STAGES=${DMOE_STAGES:-env build tests}
BUILD=${BUILD_DIR:-build-gpu}
NCCL_ROOT=${DIST_MOE_NCCL_ROOT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl}
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
has() { [[ " $STAGES " == *" $1 "* ]]; }

if has env; then
  {
    nvidia-smi -L; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
    nvcc --version | tail -1; cmake --version | head -1; python3 -c "import torch; print('torch', torch.__version__)"
    ls "$NCCL_ROOT" "$NCCL_ROOT/include" "$NCCL_ROOT/lib" 2>&1
  } > "$OUT/env.txt" 2>&1
  say "env: $(nvidia-smi -L | wc -l) GPU(s); $(nvcc --version | tail -1)"
fi

if has build; then
  # cmake/nccl.cmake picks the newest NCCL with the device API by itself; this run names the torch
  # wheel's (the NCCL torch loads into the same processes). A wheel without the device-API headers
  # borrows those of another candidate of the same version.
  nccl_args=(-DDIST_MOE_NCCL_ROOT="$NCCL_ROOT")
  start=$(date +%s)
  if cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDIST_MOE_PTXAS_VERBOSE=ON \
       -DPython_EXECUTABLE="$(command -v python3)" "${nccl_args[@]}" > "$OUT/build.log" 2>&1 &&
     cmake --build "$BUILD" -j "$(nproc)" >> "$OUT/build.log" 2>&1; then
    say "build: ok in $(( $(date +%s) - start )) s"
  else
    say "build: FAILED (tail of build.log follows)"; grep -E "error|FAILED" "$OUT/build.log" | head -20 | tee -a "$SUMMARY"
    exit 1
  fi
  grep -E "spill|Used [0-9]+ registers|Compiling entry" "$OUT/build.log" | grep -B1 -E "[1-9][0-9]* bytes spill" | head -20 >> "$SUMMARY"
fi

if has tests; then
  "$BUILD/tests/dist_moe_gpu_tests" --gtest_color=no > "$OUT/gpu_tests.log" 2>&1
  rc=$?
  say "gpu tests (rc=$rc): $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|tests? ran' "$OUT/gpu_tests.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \]" "$OUT/gpu_tests.log" | head -20 | tee -a "$SUMMARY"
fi

if has pipeline; then
  n=$(nvidia-smi -L | wc -l)
  timeout 900 "$BUILD/dmoe_launch" -n "$n" --timeout 800 -- "$BUILD/tests/dist_moe_pipeline_tests" > "$OUT/pipeline.log" 2>&1
  say "pipeline tests (rc=$?): $(grep -E 'ALL PASS|FAILED:|ERROR' "$OUT/pipeline.log" | head -4 | tr '\n' ' ')"
  grep -E "FAIL case" "$OUT/pipeline.log" | head -10 | tee -a "$SUMMARY"
  timeout 300 "$BUILD/dmoe_launch" -n "$n" --timeout 250 -- "$BUILD/examples/two_layer_moe" >> "$OUT/pipeline.log" 2>&1
  say "two-layer example (rc=$?): $(grep -E 'two-layer MoE' "$OUT/pipeline.log" | tr '\n' ' ')"
  timeout 400 ctest --test-dir "$BUILD" -R pipeline_trap --output-on-failure >> "$OUT/pipeline.log" 2>&1
  say "pipeline trap tests (rc=$?): $(grep -E 'tests passed|tests failed' "$OUT/pipeline.log" | tail -1)"
fi

if has bench; then
  for shape in ${DMOE_BENCH_SHAPES:-dsv3_prefill qwen3_30b mixtral}; do
    timeout 600 "$BUILD/dist-moe" bench --shape "$shape" --mode train --iters 10 >> "$OUT/bench.log" 2>&1
    say "bench $shape train (rc=$?)"; tail -6 "$OUT/bench.log" | tee -a "$SUMMARY" > /dev/null
  done
  timeout 300 "$BUILD/dist-moe" bench --shape dsv3_decode --mode infer --iters 20 >> "$OUT/bench.log" 2>&1
  say "bench dsv3_decode infer (rc=$?)"; tail -5 "$OUT/bench.log" | tee -a "$SUMMARY" > /dev/null
fi

# treeab: the layer of an older source tree against this one, interleaved (behaviour-unchanged
# refactors: every layer time within a few percent). A_TREE: the older tree unpacked into an
# ignored folder (default .abtree: `git archive BASE | tar -x -C .abtree`, carried with the call).
if has treeab; then
  A_TREE=${A_TREE:-.abtree}
  start=$(date +%s)
  if cmake -S "$A_TREE" -B "$A_TREE/build-ab" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDIST_MOE_BUILD_PYTHON=OFF \
       -DDIST_MOE_BUILD_BENCH=OFF -DDIST_MOE_NCCL_ROOT="$NCCL_ROOT" > "$OUT/treeab_build.log" 2>&1 &&
     cmake --build "$A_TREE/build-ab" -j "$(nproc)" --target dist-moe dmoe_launch >> "$OUT/treeab_build.log" 2>&1; then
    say "treeab: A tree ($A_TREE) built in $(( $(date +%s) - start )) s"
  else
    say "treeab: A build FAILED"; tail -20 "$OUT/treeab_build.log" | tee -a "$SUMMARY"; exit 1
  fi
  : > "$OUT/treeab.txt"
  for shape in ${DMOE_AB_SHAPES:-dsv3_prefill qwen3_30b mixtral dsv3_decode}; do
    mode=train; [ "$shape" = dsv3_decode ] && mode=infer
    A_BUILD="$A_TREE/build-ab" B_BUILD="$BUILD" SHAPE=$shape MODE=$mode ROUNDS=${DMOE_AB_ROUNDS:-2} OUT=/tmp/dmoe-treeab \
      bash scripts/layer_ab.sh >> "$OUT/treeab.txt" 2>&1
    grep -A2 "^layer A/B $shape" "$OUT/treeab.txt" | tee -a "$SUMMARY" > /dev/null
  done
fi

for stage in gemm comm ep; do
  if has $stage && [ -x "scripts/${stage}_gpu_check.sh" ]; then
    BUILD_DIR="$BUILD" OUT="$OUT" bash "scripts/${stage}_gpu_check.sh" >> "$OUT/${stage}.log" 2>&1
    say "$stage: rc=$? (tail of $stage.log)"; tail -25 "$OUT/${stage}.log" | tee -a "$SUMMARY" > /dev/null
  fi
done

echo "================ summary ================"
cat "$SUMMARY"
