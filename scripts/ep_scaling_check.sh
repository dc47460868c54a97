#!/usr/bin/env bash
# Issue #8 (EP4/EP8 validation and scaling) on a machine with 4 or 8 GPUs (device kinds
# nvidia-h200-x4 / nvidia-h200-x8). For every EP size in $EP_SIZES (default: 2, 4, 8 up to the GPUs
# present; smaller sizes run on the first GPUs):
#   suites  the communication suite, the BF16 pipeline suite and the two-layer example through
#           dmoe_launch -n N, and the torch two-rank suite with DMOE_TEST_RANKS=N (stage torch);
#   bench   `dist-moe bench --gpus N` on the four reference shapes (train; decode: infer) and
#           bench_dispatch_combine (ours vs NVLink ceiling vs NCCL all-to-all) for dsv3_prefill and
#           dsv3_decode;
#   plot    scripts/plot_scaling.py over every layer-bench section: the markdown table (time per
#           layer against EP size) and $OUT/scaling.svg (copy it to docs/ with the table in perf.md).
# At most seven files go to $OUT (the device tool returns eight); a short table is printed last.
# The full set takes longer than one 10-minute device call at EP8: split it, e.g.
#   STAGES="build suites" scripts/ep_scaling_check.sh
#   STAGES="build torch" scripts/ep_scaling_check.sh            (pip-installs the package first)
#   STAGES="build bench plot" EP_SIZES="4 8" SHAPES="dsv3_prefill qwen3_30b" scripts/ep_scaling_check.sh
# DRY_RUN=1 prints the commands instead of running them (for a check on a machine without GPUs).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-/tmp/dmoe-ep-out}
BUILD=${BUILD_DIR:-build-gpu}
STAGES=${STAGES:-build suites bench plot}
SHAPES=${SHAPES:-dsv3_prefill qwen3_30b mixtral dsv3_decode}
DRY_RUN=${DRY_RUN:-0}
NCCL_ROOT=${DIST_MOE_NCCL_ROOT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH="$NCCL_ROOT/lib:${LD_LIBRARY_PATH:-}"
mkdir -p "$OUT"
SUMMARY="$OUT/ep_summary.txt"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
has() { [[ " $STAGES " == *" $1 "* ]]; }
run() {  # run (or, with DRY_RUN=1, print) a command; returns its status
  if [ "$DRY_RUN" = 1 ]; then echo "+ $*"; return 0; fi
  "$@"
}

if [ "$DRY_RUN" = 1 ]; then NGPU=${NGPU:-8}; else NGPU=$(nvidia-smi -L | wc -l); fi
if [ -z "${EP_SIZES:-}" ]; then
  EP_SIZES=""
  for n in 2 4 8; do [ "$n" -le "$NGPU" ] && EP_SIZES="$EP_SIZES $n"; done
fi
say "ep_scaling_check: $NGPU GPU(s), EP sizes:$EP_SIZES, stages: $STAGES"
LAUNCH="$BUILD/dmoe_launch"
# The first n GPUs for an EP-n run (dmoe_launch gives rank r GPU r of the visible ones).
gpus_for() { seq -s, 0 $(( $1 - 1 )); }

if has build; then
  start=$(date +%s)
  if OUT="$OUT" run bash scripts/quick_build.sh dmoe_launch dist_moe_comm_tests dist_moe_pipeline_tests \
       bench_dispatch_combine two_layer_moe dist-moe > /dev/null; then
    say "build: ok in $(( $(date +%s) - start )) s"
  else
    say "build: FAILED (see $OUT/build.log)"; exit 1
  fi
fi

if has suites; then
  : > "$OUT/ep_suites.log"
  for n in $EP_SIZES; do
    for t in comm pipeline; do
      echo "##### $t suite, EP$n" >> "$OUT/ep_suites.log"
      CUDA_VISIBLE_DEVICES=$(gpus_for "$n") run timeout 900 "$LAUNCH" -n "$n" --timeout 800 -- \
        "$BUILD/tests/dist_moe_${t}_tests" >> "$OUT/ep_suites.log" 2>&1
      rc=$?
      say "EP$n $t suite (rc=$rc): $(grep -A100000 "##### $t suite, EP$n" "$OUT/ep_suites.log" |
        grep -E '^\[rank 0\] (\[rank 0\] )?(ALL PASS|SOME FAILED)' | head -1)"  # the pipeline suite prefixes its own rank
    done
    echo "##### two-layer example, EP$n" >> "$OUT/ep_suites.log"
    CUDA_VISIBLE_DEVICES=$(gpus_for "$n") run timeout 300 "$LAUNCH" -n "$n" --timeout 250 -- \
      "$BUILD/examples/two_layer_moe" >> "$OUT/ep_suites.log" 2>&1
    say "EP$n two-layer example (rc=$?)"
  done
fi

if has torch; then
  # pip install . (its logs stay out of $OUT: the device tool returns at most eight files)
  STAGES=install OUT=/tmp/dmoe-torch-install run bash scripts/torch_gpu_check.sh > /dev/null 2>&1
  say "torch package install (rc=$?)"
  : > "$OUT/ep_torch.log"
  for n in $EP_SIZES; do
    echo "##### tests/torch/test_two_rank.py, EP$n" >> "$OUT/ep_torch.log"
    (cd /tmp && DMOE_TEST_RANKS=$n CUDA_VISIBLE_DEVICES=$(gpus_for "$n") run timeout 1200 python -m pytest -q \
       -p no:cacheprovider -rfE "$ROOT/tests/torch/test_two_rank.py" >> "$OUT/ep_torch.log" 2>&1)
    say "EP$n torch suite (rc=$?): $(tail -1 "$OUT/ep_torch.log")"
  done
fi

if has bench; then
  for n in $EP_SIZES; do
    for shape in $SHAPES; do
      mode=train
      [ "$shape" = dsv3_decode ] && mode=infer
      run timeout 900 "$BUILD/dist-moe" bench --shape "$shape" --mode "$mode" --gpus "$n" --iters 10 \
        >> "$OUT/ep_layer_bench.log" 2>&1
      rc=$?
      # The ratios of this bench's own section (the last one in the log).
      say "EP$n bench $shape $mode (rc=$rc): $(awk '/^dist-moe bench: /{s=""} {s=s $0 "\n"} END{printf "%s", s}' \
        "$OUT/ep_layer_bench.log" | grep -E '^(forward|forward\+backward|inference forward) ' |
        awk '{print $1, $(NF)}' | tr '\n' ' ')"
    done
    echo "##### bench_dispatch_combine, EP$n" >> "$OUT/ep_comm_bench.log"
    CUDA_VISIBLE_DEVICES=$(gpus_for "$n") run timeout 600 "$LAUNCH" -n "$n" --timeout 500 -- \
      "$BUILD/bench/bench_dispatch_combine" --shape dsv3_prefill,dsv3_decode --no-sweep >> "$OUT/ep_comm_bench.log" 2>&1
    say "EP$n bench_dispatch_combine (rc=$?)"
    grep -A100000 "##### bench_dispatch_combine, EP$n" "$OUT/ep_comm_bench.log" | grep -E "^\[rank 0\] (PASS|FAIL) " |
      sed "s/^\[rank 0\]/  EP$n/" | tee -a "$SUMMARY" > /dev/null
  done
fi

if has plot; then
  logs=$(ls "$OUT"/ep_layer_bench.log 2>/dev/null)
  if [ -n "$logs" ]; then
    run python3 scripts/plot_scaling.py $logs --svg "$OUT/scaling.svg" > "$OUT/scaling.md"
    say "scaling table: $OUT/scaling.md, chart: $OUT/scaling.svg"
    cat "$OUT/scaling.md" >> "$SUMMARY"
  else
    say "plot: no layer bench log in $OUT (run the bench stage first)"
  fi
fi

echo "================ summary ================"
cat "$SUMMARY"
