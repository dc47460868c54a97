#!/usr/bin/env bash
# The one GPU-machine runner: configure (NCCL from the torch venv), build everything with all cores,
# then run the stages named in $DMOE_STAGES, write logs to $OUT (default /tmp/dmoe-out) and print a
# short table last. Stages run in the order below, whatever order they are named in:
#   env         GPUs, clocks, topology, toolkit, torch, NCCL                         env.txt
#   build       configure + build everything into $BUILD_DIR (ptxas -v on)           build.log
#   install     `python -m pip install .` (the README's Python quick start)          pip_install.log
#   tests       dist_moe_gpu_tests                                                   gpu_tests.log
#   pipeline    the pipeline suite, the two-layer example on every GPU, trap tests   pipeline.log
#   mxfp8       the MXFP8 staged layer suite on every GPU                            mxfp8.log
#   fp8bw       the FP8-blockwise inference and training layer suites on every GPU   fp8bw.log, fp8bw_train.log
#   nvfp4       the NVFP4 inference layer suite on every GPU, its trap tests          nvfp4.log
#   mega        the Mega pipeline: its GPU tests, the suites' Mega cases, torch Mega   mega.log
#   quant       bench_quantize and the Quantize* + SwigluBackwardQuantize* GPU tests  quant.log
#   bench       `dist-moe bench`: $DMOE_BENCH_SHAPES train, dsv3_decode infer        bench.log
#               (DMOE_BENCH_FORMAT=nvfp4 etc.: that layer against our BF16 layer per shape;
#               DMOE_BENCH_PIPELINE=mega: the Mega layer, the staged one alternated too)
#   torch       tests/torch, tests/python, the examples (the package `install` put in place, else
#               the build's in-place modules)        torch_tests.log python_tests.log examples.log
#   torchbench  bench/torch_layer_bench.py                                           torch_bench.log
#   gemm        grouped GEMMs: ptxas / SASS, tests, benchmark, torch peer, targets   gemm*.{log,txt,csv}
#   comm        dispatch / combine: routing tests, suites, traps, sanitizer, bench   comm*.log
#   ep          per EP size: suites, torch suite, layer and comm benchmarks, plot    ep_*.log scaling.{md,svg}
#   treeab      an older source tree (A) against this one (B): layer, GEMM, quantizers treeab.txt treeab_build.log
#   ab          the layer under two environments (A_ENV, B_ENV)                      ab.txt
#   patchab     source variants given as patches, one build directory                patchab.log
#   delay       every rank made late after every pipeline stage (ordering check)     delay.log
#   contention  the example and the pipeline suite beside a comm-suite loop          contention.log
#   ncu         Nsight Compute (sections, stall sampling) + SASS of chosen kernels   ncu.txt ncu_sass.txt
# Default: env build tests. Each stage builds the targets it needs when `build` has not run.
#   DMOE_STAGES="build tests gemm" scripts/gpu_check.sh
#   DMOE_STAGES="install torch" scripts/gpu_check.sh           (the README's Python quick start, then its suites)
# Stage settings (environment; defaults in brackets) are listed at the top of each scripts/gpu_stages/*.sh.
# $OUT: the device tool returns at most 8 files; when a run leaves more, every file but summary.txt
# goes into $OUT/logs.tar.gz (tar -xzf it). Intermediates stay in $WORK [/tmp/dmoe-work].
# DMOE_DRY_RUN=1 prints the GPU commands instead of running them (a check on a machine without GPUs).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck disable=SC2034  # ROOT: used by the stages
ROOT=$PWD
OUT=${OUT:-/tmp/dmoe-out}
WORK=${WORK:-/tmp/dmoe-work}
mkdir -p "$OUT" "$WORK"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
STAGES=${DMOE_STAGES:-env build tests}
BUILD=${BUILD_DIR:-build-gpu}
NCCL_ROOT=${DIST_MOE_NCCL_ROOT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl}
DRY_RUN=${DMOE_DRY_RUN:-0}
ALL_STAGES="env build install tests pipeline mxfp8 fp8bw nvfp4 mega quant bench torch torchbench gemm comm ep treeab ab patchab delay contention ncu"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
has() { [[ " $STAGES " == *" $1 "* ]]; }
exec 3>&1  # the console: x prints dry-run commands there, whatever the caller redirects
x() {  # run a GPU-side command, or print it with DMOE_DRY_RUN=1; returns its status
  if [ "$DRY_RUN" = 1 ]; then echo "+ $*" >&3; return 0; fi
  "$@"
}
for s in $STAGES; do
  [[ " $ALL_STAGES " == *" $s "* ]] || { echo "unknown stage '$s' (stages: $ALL_STAGES)" >&2; exit 2; }
done
if [ "$DRY_RUN" = 1 ]; then NGPU=${NGPU:-2}; else NGPU=$(nvidia-smi -L | wc -l); fi

# Configure $BUILD the way the build stage does: the build stage always, the others when nothing
# configured it yet.
configure() {  # log [always]
  [ -f "$BUILD/CMakeCache.txt" ] && [ -z "${2:-}" ] && [ "$DRY_RUN" != 1 ] && return 0
  x cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDIST_MOE_PTXAS_VERBOSE=ON \
    -DPython_EXECUTABLE="$(command -v python3)" -DDIST_MOE_NCCL_ROOT="$NCCL_ROOT" >> "$1" 2>&1
}
# The targets a stage needs (a no-op after the build stage; log in $WORK); says what failed.
build_targets() {  # stage target...
  local stage=$1 log="$WORK/build_$1.log"; shift
  : > "$log"
  if configure "$log" && x cmake --build "$BUILD" -j "$(nproc)" --target "$@" >> "$log" 2>&1; then return 0; fi
  say "$stage: build of $* FAILED (tail of $log)"; grep -E "error|FAILED" "$log" | head -20 | tee -a "$SUMMARY"
  return 1
}

# Stage results for the closing table: name, status, seconds.
declare -a DONE=()
stage_end() {  # stage rc start (rc 77: nothing to run)
  local st=ok; [ "$2" = 0 ] || st="rc=$2"; [ "$2" = 77 ] && st=skipped
  DONE+=("$(printf '%-11s %-7s %5d s' "$1" "$st" $(( $(date +%s) - $3 )))")
}

finish() {
  local n
  n=$(find "$OUT" -type f ! -name logs.tar.gz | wc -l)
  if [ "$n" -gt 8 ]; then  # the device tool returns at most 8 files
    (cd "$OUT" && find . -type f ! -name summary.txt ! -name logs.tar.gz -printf '%P\n' | sort |
       tar -czf "$WORK/logs.tar.gz" -T - &&
       find . -type f ! -name summary.txt ! -name logs.tar.gz -delete && mv "$WORK/logs.tar.gz" logs.tar.gz)
    echo "logs: $((n - 1)) files in $OUT/logs.tar.gz (tar -xzf logs.tar.gz)" >> "$SUMMARY"
  fi
  echo "================ summary ================"
  cat "$SUMMARY"
  if [ ${#DONE[@]} -gt 0 ]; then
    echo "---- stages"
    printf '%s\n' "${DONE[@]}"
  fi
}
trap finish EXIT

if has env; then
  t0=$(date +%s)
  {
    x nvidia-smi -L; x nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
    x nvidia-smi topo -m
    nvcc --version | tail -1; cmake --version | head -1; python3 -c "import torch; print('torch', torch.__version__)"
    ls "$NCCL_ROOT" "$NCCL_ROOT/include" "$NCCL_ROOT/lib" 2>&1
  } > "$OUT/env.txt" 2>&1
  say "env: $NGPU GPU(s); $(nvcc --version | tail -1)"
  stage_end env 0 "$t0"
fi

if has build; then
  # cmake/nccl.cmake picks the newest NCCL with the device API by itself; this run names the torch
  # wheel's (the NCCL torch loads into the same processes). A wheel without the device-API headers
  # borrows those of another candidate of the same version.
  start=$(date +%s)
  : > "$OUT/build.log"
  if configure "$OUT/build.log" always && x cmake --build "$BUILD" -j "$(nproc)" >> "$OUT/build.log" 2>&1; then
    say "build: ok in $(( $(date +%s) - start )) s"
    stage_end build 0 "$start"
  else
    say "build: FAILED (tail of build.log follows)"; grep -E "error|FAILED" "$OUT/build.log" | head -20 | tee -a "$SUMMARY"
    stage_end build 1 "$start"
    exit 1
  fi
  grep -E "spill|Used [0-9]+ registers|Compiling entry" "$OUT/build.log" | grep -B1 -E "[1-9][0-9]* bytes spill" | head -20 >> "$SUMMARY"
fi

# The other stages live in scripts/gpu_stages/ (one function per stage, run in the order of
# $ALL_STAGES).
for f in scripts/gpu_stages/*.sh; do
  # shellcheck source=/dev/null
  source "$f"
done
for stage in $ALL_STAGES; do
  case $stage in env | build) continue ;; esac
  has "$stage" || continue
  t0=$(date +%s)
  "stage_$stage"
  stage_end "$stage" $? "$t0"
done
