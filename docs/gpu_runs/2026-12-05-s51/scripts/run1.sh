#!/usr/bin/env bash
# s51 r1 (main's kernels, no change): where the FP8-blockwise 128x256 FPROP's cycles go (G66 left
# "epilogue, TMA / L2, scheduler" unpriced against the promotion pattern's 0.83 ceiling).
#  1. the SM clock and power under sustained FP8 vs BF16 W13 FPROP load (nvidia-smi samples)
#  2. ncu (clocks not locked) of the W13 FPROP + SwiGLU and the W2 FPROP at qwen3_30b EP2 sizes:
#     speed of light, warp states, scheduler, and the per-instruction source page (SASS + CUDA lines)
RUN_NAME=s51r1; source scripts/device_run_prelude.sh
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target bench_grouped_gemm >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
B=build-gpu/bench/bench_grouped_gemm
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 100 > $L/smi.csv 2>&1 &
SMI=$!
for op in w13_fprop_fp8 w13_fprop w2_fprop_fp8 w2_fprop; do
  echo "=== $op start $(date +%s.%N)" >> $L/smi_marks.txt
  timeout 60 $B --ep 2 --shapes qwen3_30b --routing balanced --ops $op --rounds 2 --sustain-ms 400 > $L/gg_$op.log 2>&1
  echo "=== $op end $(date +%s.%N)" >> $L/smi_marks.txt
done
kill $SMI 2>/dev/null
grep -hE "^qwen3" $L/gg_*.log | head -8
python3 - "$L" <<'PY'
import sys, csv, datetime
L = sys.argv[1]
rows = [r for r in csv.reader(open(f"{L}/smi.csv")) if r and r[0][:2] == "20"]
marks = [l.split() for l in open(f"{L}/smi_marks.txt")]
def ts(r): return datetime.datetime.strptime(r[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
for i in range(0, len(marks), 2):
    op, t0, t1 = marks[i][1], float(marks[i][3]), float(marks[i + 1][3])
    sel = [r for r in rows if t0 + 1.0 <= ts(r) <= t1]
    if not sel: print(op, "no samples"); continue
    clk = [float(r[1].split()[0]) for r in sel]; pw = [float(r[3].split()[0]) for r in sel]
    print(f"{op:16s} samples {len(sel):3d}  SM clock MHz median {sorted(clk)[len(clk)//2]:.0f} min {min(clk):.0f}  power W median {sorted(pw)[len(pw)//2]:.0f}")
PY
K0='Sm90Fp8BlockwiseMainloop<dist_moe::gemm::MainloopConfig<\(dist_moe::gemm::GemmKind\)0, \(int\)128, \(int\)256'
for op in w13_fprop_fp8 w2_fprop_fp8; do
  timeout 150 ncu --clock-control none --kernel-name-base demangled -k "regex:$K0" --launch-skip 3 -c 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
    --section ComputeWorkloadAnalysis -o $L/ncu_$op \
    $B --ep 2 --shapes qwen3_30b --routing balanced --ops $op --iters 4 --sustain-ms 0 > $L/ncu_${op}_run.txt 2>&1
  echo "ncu $op rc=$? at $((SECONDS-T0)) s"
  timeout 60 ncu --import $L/ncu_$op.ncu-rep --page details > $L/ncu_${op}_details.txt 2>&1
  timeout 90 ncu --import $L/ncu_$op.ncu-rep --page source --csv --print-source sass > $L/ncu_${op}_sass.csv 2>&1
  timeout 90 ncu --import $L/ncu_$op.ncu-rep --page source --csv --print-source cuda,sass > $L/ncu_${op}_cuda_sass.csv 2>&1
  echo "  source pages: $(wc -l < $L/ncu_${op}_sass.csv) / $(wc -l < $L/ncu_${op}_cuda_sass.csv) lines"
  grep -E "SM Frequency|Duration|Compute \(SM\) Th|Issue Slots Busy|Warp Cycles Per Issued|Eligible Warps|L2 Cache Th|DRAM Th" $L/ncu_${op}_details.txt | head -10
  rm -f $L/ncu_$op.ncu-rep
done
