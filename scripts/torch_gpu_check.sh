#!/usr/bin/env bash
# On the GPU machine: the README's Python quick start verbatim (pip install . into the torch
# environment), then the torch GPU suites (tests/torch, run from outside the checkout so the
# installed package is what gets imported) and the three examples. Logs go to $OUT; a short table
# is printed last.
#   STAGES="install tests examples bench" scripts/torch_gpu_check.sh   (or "cmake ..." for an in-place build)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/dmoe-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
STAGES=${STAGES:-install tests examples}
SUMMARY="$OUT/torch_summary.txt"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
has() { [[ " $STAGES " == *" $1 "* ]]; }
NGPU=$(nvidia-smi -L | wc -l)

if has cmake; then  # development path: build the modules in place and import them from python/
  start=$(date +%s)
  if cmake -S . -B build-torch -G Ninja -DCMAKE_BUILD_TYPE=Release -DDIST_MOE_BUILD_TESTS=OFF -DDIST_MOE_BUILD_BENCH=OFF \
       -DPython_EXECUTABLE="$(command -v python)" \
       -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > "$OUT/cmake.log" 2>&1 &&
     cmake --build build-torch --target dist_moe_native dist_moe_torch >> "$OUT/cmake.log" 2>&1; then
    say "cmake build of _native and _C: ok in $(( $(date +%s) - start )) s ($(ldd python/dist_moe/_C*.so | grep -c 'libstdc++') shared libstdc++)"
    export PYTHONPATH=$ROOT/python
  else
    say "cmake build: FAILED"; grep -E "error|Error" "$OUT/cmake.log" | head -20 | tee -a "$SUMMARY"; exit 1
  fi
fi

# Neither stage: use modules an earlier build left in place (scripts/gpu_check.sh builds _native and
# _C into python/dist_moe with the venv's Python), so one device call can build once for everything.
if ! has cmake && ! has install && ls python/dist_moe/_C*.so > /dev/null 2>&1; then
  export PYTHONPATH=$ROOT/python
  say "using the in-place modules: $(ls python/dist_moe/_C*.so)"
fi

if has install; then
  start=$(date +%s)
  if python -m pip install . > "$OUT/pip_install.log" 2>&1; then
    say "python -m pip install .: ok in $(( $(date +%s) - start )) s ($(cd /tmp && python -c 'import dist_moe, dist_moe._C as c; print(dist_moe.__file__, "nccl", c.nccl_version())'))"
  else
    say "python -m pip install .: FAILED"; tail -30 "$OUT/pip_install.log" | tee -a "$SUMMARY"; exit 1
  fi
fi

if has tests; then
  (cd /tmp && timeout 1500 python -m pytest -q -p no:cacheprovider -rfE "$ROOT/tests/torch" > "$OUT/torch_tests.log" 2>&1)
  say "pytest tests/torch (rc=$?): $(tail -1 "$OUT/torch_tests.log")"
  grep -E "^(FAILED|ERROR)" "$OUT/torch_tests.log" | head -20 | tee -a "$SUMMARY"
  (cd /tmp && timeout 300 python -m pytest -q -p no:cacheprovider "$ROOT/tests/python" > "$OUT/python_tests.log" 2>&1)
  say "pytest tests/python against the installed package (rc=$?): $(tail -1 "$OUT/python_tests.log")"
fi

if has examples; then
  : > "$OUT/examples.log"
  (cd /tmp && python "$ROOT/examples/memory_planning.py" >> "$OUT/examples.log" 2>&1)
  say "examples/memory_planning.py: rc=$?"
  for ex in bf16_training bf16_inference; do
    timeout 300 torchrun --standalone --nproc-per-node="$NGPU" "examples/$ex.py" >> "$OUT/examples.log" 2>&1
    say "examples/$ex.py on $NGPU GPU(s): rc=$? | $(grep -E "^$ex: OK|us/call" "$OUT/examples.log" | tail -2 | tr '\n' ' ')"
  done
fi
if has bench; then
  timeout 500 python bench/torch_layer_bench.py --shapes "${BENCH_SHAPES:-qwen3_30b,dsv3_prefill,dsv3_decode}" > "$OUT/torch_bench.log" 2>&1
  say "bench/torch_layer_bench.py (rc=$?):"; grep -A8 "torch front end vs" "$OUT/torch_bench.log" | tee -a "$SUMMARY" > /dev/null
fi
echo "---- summary"; cat "$SUMMARY"
