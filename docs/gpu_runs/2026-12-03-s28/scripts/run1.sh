#!/usr/bin/env bash
# s28 r1: ncu of every GPU quantizer in bench_quantize (dsv3_prefill and qwen3_30b, EP2 sizes), the
# question G42 left: where do the below-target quantizers lose against the copy (DRAM bytes vs
# counted, L2 write sectors per request, issue, stalls). Then the plain bench_quantize table.
O=${OUT:-/tmp/o}; L=/tmp/s28r1; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target bench_quantize >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
B=build-gpu/bench/bench_quantize
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_requests_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,lts__t_requests_srcunit_tex_op_write.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,sm__maximum_warps_per_active_cycle_pct,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__average_warp_latency_issue_stalled_barrier,smsp__average_warp_latency_issue_stalled_long_scoreboard
timeout 400 ncu --clock-control none --set full --import-source no -k regex:'quantize|nvfp4|expand|weight_|transpose_e4m3' \
  -o $L/quant $B --shapes dsv3_prefill,qwen3_30b --sustain-ms 0 --iters 1 > $L/ncu_run.log 2>&1
echo "ncu rc=$? at $((SECONDS-T0)) s"
ncu -i $L/quant.ncu-rep --page raw --csv --metrics $M > $L/raw.csv 2>&1
ncu -i $L/quant.ncu-rep --page details > $L/details.txt 2>&1
python3 - $L/raw.csv <<'PY'
import csv,sys
rows=list(csv.reader(open(sys.argv[1])))
h=rows[0]; idx={k:i for i,k in enumerate(h)}
want=["Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum","dram__bytes_write.sum","lts__t_sectors_srcunit_tex_op_write.sum","lts__t_requests_srcunit_tex_op_write.sum","smsp__issue_active.avg.pct_of_peak_sustained_active","dram__throughput.avg.pct_of_peak_sustained_elapsed","launch__registers_per_thread"]
print(" | ".join(w.split("__")[-1][:18] for w in want))
for r in rows[2:]:
  try: print(" | ".join(r[idx[w]][:40] for w in want))
  except Exception as e: print("?", e)
PY
echo "ncu table at $((SECONDS-T0)) s"
timeout 200 $B > $L/bench_quantize.log 2>&1; echo "bench rc=$?"; tail -31 $L/bench_quantize.log
