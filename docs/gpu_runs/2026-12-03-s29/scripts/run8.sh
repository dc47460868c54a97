#!/usr/bin/env bash
# s29 r8: where the FP8-blockwise GEMM kernels stall, per SASS instruction (ncu source counters and
# warp states): the W13 FPROP 128x256 (41% of the tensor peak in r6) and the WGRAD 128x128, at
# qwen3_30b per-rank EP2 sizes, one launch each.
O=${OUT:-/tmp/o}; L=/tmp/s29r8; mkdir -p $O $L
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target bench_grouped_gemm >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
P='Sm90Fp8BlockwiseMainloop<dist_moe::gemm::MainloopConfig<\(dist_moe::gemm::GemmKind\)'
prof() {  # tag regex ops
  timeout 200 ncu --clock-control none --kernel-name-base demangled -k "regex:$2" --launch-skip 2 -c 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight --import-source no -o $L/$1 \
    build-gpu/bench/bench_grouped_gemm --shapes qwen3_30b --routing balanced --ops $3 --iters 3 > $L/$1_run.txt 2>&1
  echo "ncu $1 rc=$? at $((SECONDS-T0)) s"
  timeout 100 ncu --import $L/$1.ncu-rep --page source --print-source sass --csv > $L/$1_source.csv 2>&1
  echo "source $1 rc=$? $(wc -l < $L/$1_source.csv) lines"
}
prof fprop "${P}0, \(int\)128, \(int\)256, \(int\)4, \(dist_moe::gemm::ConsumerSchedule\)0, \(dist_moe::gemm::WeightSplit\)1, \(int\)1" w13_fprop_fp8
prof wgrad "${P}2, \(int\)128, \(int\)128, \(int\)5" w13_wgrad_fp8
python3 - <<'PY'
import csv, io
for tag in ("fprop", "wgrad"):
    try: rows = list(csv.reader(io.StringIO(''.join(l for l in open(f'/tmp/s29r8/{tag}_source.csv') if l.startswith('"')))))
    except Exception as e: print(tag, 'no csv', e); continue
    if len(rows) < 2: print(tag, 'no rows'); continue
    h = rows[0]; print(tag, 'columns:', '|'.join(h[:40]))
    src = h.index('Source') if 'Source' in h else 1
    samp = [i for i, c in enumerate(h) if 'Warp Stall Sampling (All' in c]
    if not samp: continue
    k = samp[0]
    def num(x):
        try: return float(x.replace(',', ''))
        except: return 0.0
    body = rows[1:]
    tot = sum(num(r[k]) for r in body)
    top = sorted(body, key=lambda r: -num(r[k]))[:25]
    print(tag, 'total samples', tot)
    for r in top: print('  %6.1f%%  %s' % (100 * num(r[k]) / max(tot, 1), r[src][:90]))
PY
