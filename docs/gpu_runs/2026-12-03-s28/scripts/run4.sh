#!/usr/bin/env bash
# s28 r4: region_tile_cost picks for the rows + columns quantizers, the MXFP8 training weight and
# the FP8-blockwise weight's band; the Quantize* GPU tests; bench_quantize twice; ncu stall reasons
# of the kernels still below target.
O=${OUT:-/tmp/o}; L=/tmp/s28r4; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target bench_quantize dist_moe_gpu_tests >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
timeout 300 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='Quantize*' > $L/tests.log 2>&1
echo "tests rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED' $L/tests.log | tr '\n' ' ') at $((SECONDS-T0)) s"
B=build-gpu/bench/bench_quantize
timeout 200 $B > $L/bench1.log 2>&1; echo "bench 1 rc=$? at $((SECONDS-T0)) s"
timeout 200 $B > $L/bench2.log 2>&1; echo "bench 2 rc=$? at $((SECONDS-T0)) s"
timeout 200 ncu --clock-control none --section WarpStateStats --section SchedulerStats --section Occupancy \
  -k regex:'quantize_rows_cols|nvfp4_rows|dequantize|expand' -o $L/stalls $B --shapes dsv3_prefill \
  --sustain-ms 0 --iters 1 > $L/ncu_run.log 2>&1; echo "ncu rc=$? at $((SECONDS-T0)) s"
ncu -i $L/stalls.ncu-rep --page raw --csv > $L/stalls_raw.csv 2>&1
rm -f $L/stalls.ncu-rep
python3 - $L/stalls_raw.csv <<'PY' | tee $L/stalls.txt
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
h = rows[0]
cols = [i for i, k in enumerate(h) if 'issue_stalled' in k and k.endswith('per_warp_active.pct')]
if not cols:
    cols = [i for i, k in enumerate(h) if 'issue_stalled' in k and 'ratio' in k]
ni = h.index('Kernel Name'); gi = h.index('Grid Size')
for r in rows[2:]:
    vals = sorted(((float(r[i].replace(',', '') or 0), h[i]) for i in cols), reverse=True)[:6]
    print(r[ni].split('::')[-1][:45], r[gi], ' | '.join(f"{k.split('stalled_')[1].split('_per')[0]} {v:.2f}" for v, k in vals))
PY
paste <(tail -30 $L/bench1.log | awk '{print $1, $2, $NF=="below"?$(NF-1):$NF}') <(tail -30 $L/bench2.log | awk '{print $NF=="below"?$(NF-1):$NF}')
