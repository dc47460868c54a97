#!/usr/bin/env bash
# s48 run 2: G107, the MXFP8 128x256 tile (four 64-column units per k32 step; DMOE_MXFP8_WIDE=1 picks
# it). Build; where ptxas's spills sit in its SASS; the MXFP8 GEMM tests (every compiled
# configuration: the new tile included); the MXFP8 GEMM table at EP2 sizes (every configuration,
# interleaved rounds, against our BF16 pick); the MXFP8 training suite with the knob on; the
# qwen3_30b / mixtral training layers with the knob 0 / 1 in alternating processes. Then, with what
# is left, run 1's measurements. RUN2_BUDGET_S: this call's device time.
RUN_NAME=s48r2; source scripts/device_run_prelude.sh
left() { echo $((${RUN2_BUDGET_S:-500} - (SECONDS - T0))); }
OUT=$L scripts/quick_build.sh bench_grouped_gemm dist-moe dmoe_launch dist_moe_gpu_tests dist_moe_mxfp8_pipeline_tests || exit 1
echo "built at $((SECONDS-T0)) s"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
# SASS of the 128x256 MXFP8 FPROP kernels: local stores / loads by position against the k loop's QGMMAs.
obj=$(find build-gpu -name 'grouped_gemm_sm90_fprop.cu.o' | head -1)
if [ -n "$obj" ]; then
  cuobjdump -sass "$obj" > $L/sass_fprop.txt 2>/dev/null
  python3 - "$L/sass_fprop.txt" <<'PY' | tee $L/sass_spills.txt
import re, sys
txt = open(sys.argv[1]).read()
for f in re.split(r"\n\s+Function : ", txt)[1:]:
    name = f.split("\n", 1)[0]
    if "Mxfp8" not in name: continue
    tile = "256" if "Li256ELi3E" in name else "128"
    lines = f.split("\n")
    q = [i for i, l in enumerate(lines) if "QGMMA" in l]
    sp = [i for i, l in enumerate(lines) if re.search(r"\b(STL|LDL)", l)]
    inside = [i for i in sp if q and q[0] <= i <= q[-1]]
    print(f"mxfp8 {tile}: {len(lines)} lines, QGMMA {len(q)} [{q[0] if q else -1}..{q[-1] if q else -1}], "
          f"STL/LDL {len(sp)}, between the first and last QGMMA {len(inside)}")
    for i in inside[:12]: print("   ", lines[i].strip()[:90])
PY
fi
timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmMxfp8*' > $L/gemm_tests_mxfp8.log 2>&1
echo "GroupedGemmMxfp8* rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/gemm_tests_mxfp8.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $L/gemm_tests_mxfp8.log | head -8
grep -E "^  mxfp8 wide" $L/gemm_tests_mxfp8.log | head -4
timeout 150 build-gpu/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral,dsv3_prefill --routing balanced \
  --rounds 2 --sustain-ms 50 --ops w13_fprop_mxfp8,w2_fprop_mxfp8,w13_dgrad_mxfp8,w2_dgrad_mxfp8 > $L/gemm_table_mxfp8.log 2>&1
echo "gemm table mxfp8 rc=$? at $((SECONDS-T0)) s:"
grep -E "^fp8 .*(\(pick\)|_tma_dyn )" $L/gemm_table_mxfp8.log | sed -E "s/ +/ /g" | cut -d" " -f2,4- | cut -c1-120
layers() {  # round
  for shape in qwen3_30b mixtral; do
    for k in 0 1; do
      [ "$(left)" -gt 40 ] || { echo "skip $shape wide=$k r$1"; continue; }
      f=$L/layer_${shape}_wide$k.$1.log
      DMOE_MXFP8_WIDE=$k DMOE_PRINT_GEMM_CONFIG=1 timeout 60 build-gpu/dist-moe bench --shape $shape --mode train --format mxfp8 \
        --no-baseline --iters 5 --sustain-ms 100 > $f 2>&1
      echo "$shape wide=$k r$1 rc=$? at $((SECONDS-T0)) s: $(grep -E '^(forward\+backward|BF16 layer forward\+backward) ' $f | sed -E 's/ +/ /g' | cut -d' ' -f1-5 | tr '\n' ';')"
      echo "   $(grep -E '^(fwd:w13|fwd:w2|bwd:w2_dgrad|bwd:w13_dgrad) ' $f | awk '{printf "%s %s (%s); ", $1, $2, $4}')"
    done
  done
}
layers 1
if [ "$(left)" -gt 130 ]; then
  DMOE_MXFP8_WIDE=1 timeout 110 build-gpu/dmoe_launch -n 1 --timeout 100 -- build-gpu/tests/dist_moe_mxfp8_pipeline_tests \
    > $L/suite_mxfp8_wide.log 2>&1
  echo "mxfp8 suite (wide) rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_mxfp8_wide.log | head -3 | tr '\n' ' ')"
fi
layers 2
[ "$(left)" -gt 120 ] && RUN1_BUDGET_S=$(( $(left) - 10 )) OUT=$L/run1 bash docs/gpu_runs/2026-12-05-s48/scripts/run1.sh 2>&1 | tail -60
