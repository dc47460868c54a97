#!/usr/bin/env bash
# On the GPU machine: the grouped GEMMs as the fused layer runs them. Stages (STAGES, default all):
#   build    dist-moe, dmoe_launch, bench_grouped_gemm, dist_moe_gpu_tests (scripts/quick_build.sh)
#   tests    the grouped-GEMM GPU tests (every compiled configuration and its run-time twins)
#   sweep    bench_grouped_gemm at $SHAPE, routing balanced/random/zipf, ops $SWEEP_OPS, each pick
#            against the configurations whose name contains $SWEEP_MATCH, 3 interleaved rounds
#   offsets  WGRAD (accumulating) with and without device-side operand offsets (the layer passes
#            its activation-buffer offsets on the device; the kernels then patch tensor maps),
#            two processes each, alternating
#   layer    dist-moe bench for each of $LAYER_SHAPES (no stock baseline unless BASELINE=""), every
#            GEMM stage of the layer next to its GEMM-only twin; default picks, then
#            DMOE_GEMM_EXPERIMENTAL=1, $LAYER_ROUNDS times
# Logs in $OUT; the summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/layer-gemm}
mkdir -p "$OUT"
STAGES=${STAGES:-build tests sweep offsets layer}
SWEEP_OPS=${SWEEP_OPS:-w13_fprop,w2_fprop,w13_dgrad,w2_dgrad}
SWEEP_MATCH=${SWEEP_MATCH:-_dyn}
SHAPE=${SHAPE:-dsv3_prefill}
LAYER_SHAPES=${LAYER_SHAPES:-$SHAPE}
LAYER_ROUNDS=${LAYER_ROUNDS:-1}
BASELINE=${BASELINE:---no-baseline}   # BASELINE= (empty) also runs the stock-PyTorch EP layer
BUILD_DIR=${BUILD_DIR:-build-gpu}
export BUILD_DIR NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
summary=()
has() { [[ " $STAGES " == *" $1 "* ]]; }
now() { date +%s; }

if has build; then
  t=$(now)
  if OUT="$OUT" scripts/quick_build.sh dist-moe dmoe_launch bench_grouped_gemm dist_moe_gpu_tests > "$OUT/build_line.txt"; then
    summary+=("build    OK in $(( $(now) - t )) s")
  else
    cat "$OUT/build_line.txt"; echo "build FAILED"; exit 1
  fi
fi
B=$BUILD_DIR

if has tests; then
  t=$(now)
  "$B/tests/dist_moe_gpu_tests" --gtest_color=no --gtest_filter='GroupedGemm*' > "$OUT/gemm_tests.log" 2>&1
  summary+=("tests    rc=$? in $(( $(now) - t )) s: $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/gemm_tests.log" | tr '\n' ' ')")
fi

if has sweep; then
  t=$(now)
  "$B/bench/bench_grouped_gemm" --shapes "$SHAPE" --routing balanced,random,zipf \
    --ops "$SWEEP_OPS" --sweep --sweep-match "$SWEEP_MATCH" --rounds 3 --sustain-ms 200 > "$OUT/sweep.log" 2>&1
  summary+=("sweep    rc=$? in $(( $(now) - t )) s (rows below: the pick, then the swept configurations)")
fi

if has offsets; then
  t=$(now)
  for round in 1 2; do
    for mode in plain offsets; do
      flag=""; [ "$mode" = offsets ] && flag="--device-offsets"
      "$B/bench/bench_grouped_gemm" --shapes "$SHAPE" --routing random --ops w13_wgrad,w2_wgrad,w13_dgrad \
        --wgrad-accumulate --rounds 3 --sustain-ms 200 $flag > "$OUT/offsets_${mode}_$round.log" 2>&1
    done
  done
  summary+=("offsets  done in $(( $(now) - t )) s")
fi

if has layer; then
  t=$(now)
  for shape in $LAYER_SHAPES; do
    for round in $(seq 1 "$LAYER_ROUNDS"); do
      for v in default experimental; do
        exp=0; [ "$v" = experimental ] && exp=1
        DMOE_GEMM_EXPERIMENTAL=$exp "$B/dist-moe" bench --shape "$shape" --mode train --iters 10 $BASELINE \
          > "$OUT/layer_${shape}_${v}_$round.log" 2>&1
      done
    done
  done
  summary+=("layer    done in $(( $(now) - t )) s")
fi

echo "==================== layer/GEMM check: summary ===================="
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader | head -2
for s in "${summary[@]}"; do echo "$s"; done
if has tests; then grep -E "^\[  FAILED  \]" "$OUT/gemm_tests.log" | head -10; fi
if has sweep; then
  echo "--- sweep (ms):"
  grep -E "^(dsv3|qwen3|mixtral)|^  sweep|^== " "$OUT/sweep.log" | cut -c1-110 | head -80
fi
if has offsets; then
  echo "--- WGRAD/DGRAD, plain vs device offsets (ms; op rows of each process):"
  for f in "$OUT"/offsets_*.log; do
    echo "$(basename "$f" .log): $(grep -E "^$SHAPE" "$f" | awk '{printf "%s %s  ", $3, $5}')"
  done
fi
if has layer; then
  for f in "$OUT"/layer_*.log; do
    echo "--- $(basename "$f" .log):"
    sed -n '/^stage (eager)/,$p' "$f" | grep -E "^(fwd|bwd):.*x |^forward|^fused|^over|^stage"
  done
fi
