#!/usr/bin/env bash
# Session 26 run 3: verify branch s26 (main + G60, the MXFP8 16-token decode tile); the wgmma rate
# table; the SASS of the NVFP4 and MXFP8 16-token decode kernels; ncu source-level stall samples of
# the NVFP4 decode W13 kernel. Everything lands in $OUT/logs.tar.gz.
O=${OUT:-/tmp/o}; L=/tmp/s26r3; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
OUT=$L/chk DMOE_STAGES="build" scripts/gpu_check.sh > $L/chk.txt 2>&1; tail -1 $L/chk.txt
echo "build done at $((SECONDS-T0)) s"
build-gpu/bench/bench_wgmma_rate > $L/wgmma_rate.log 2>&1; echo "wgmma rc=$?"; grep -E "^(family|f16 RS|e4m3 SS|bf16 SS) +(N|16|32) " $L/wgmma_rate.log | head -40
timeout 240 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmMxfp8*:GroupedGemmDecode*:GroupedGemmNvfp4*:Nvfp4ExpandRows*' > $L/gemm_tests.log 2>&1
echo "gemm tests rc=$?"; grep -E "^\[  FAILED|PASSED|tests ran" $L/gemm_tests.log | tail -6
b() { timeout 90 build-gpu/dist-moe bench --shape dsv3_decode --format $1 --mode infer --no-baseline --iters 10 --sustain-ms 50; }
for f in mxfp8 nvfp4 mxfp8 nvfp4; do b $f > $L/bench_${f}_$RANDOM.log 2>&1; done
for f in $L/bench_*.log; do echo "== $(basename $f)"; grep -E "fwd:w13  |fwd:w2  |inference forward|BF16 layer" $f | head -4; done
OUT=$L/st DMOE_STAGES="mxfp8 nvfp4" scripts/gpu_check.sh > $L/st.txt 2>&1
grep -E "pipeline tests|trap tests" $L/st.txt | tail -4
cuobjdump -sass build-gpu/libdist_moe_gemm.a > $L/all.sass 2>&1
python3 - $L/all.sass $L <<'PY'
import sys, re
text = open(sys.argv[1]).read().split("\n")
want = {"nvfp4_16_w13": ("Sm90Nvfp4SwapABMainloop", "Li256ELi16E", "SwapABSwigluEpilogue"),
        "nvfp4_16_w2": ("Sm90Nvfp4SwapABMainloop", "Li256ELi16E", "SwapABStoreEpilogue"),
        "mxfp8_16_w13": ("Sm90BlockScaledSwapABMainloop", "Li256ELi16E", "SwapABSwigluEpilogue")}
cur = None; out = {k: [] for k in want}
for line in text:
    if "Function :" in line:
        cur = None
        for k, keys in want.items():
            if all(x in line for x in keys) and not out[k]: cur = k
    if cur: out[cur].append(line)
for k, lines in out.items():
    open(f"{sys.argv[2]}/{k}.sass", "w").write("\n".join(lines))
    print(k, len(lines), "lines")
PY
rm -f $L/all.sass
timeout 150 ncu --kernel-name-base demangled -k "regex:Nvfp4SwapAB.*SwapABSwiglu" -c 1 --section SourceCounters --section WarpStateStats \
  --import-source no -o $L/nvfp4_w13 build-gpu/dist-moe bench-rank --shape dsv3_decode --format nvfp4 --mode infer --iters 2 > $L/ncu_run.txt 2>&1
echo "ncu rc=$?"
timeout 60 ncu --import $L/nvfp4_w13.ncu-rep --page source --print-source sass --csv > $L/ncu_source.csv 2>&1; echo "ncu source rc=$? $(wc -l < $L/ncu_source.csv) lines"
head -c 600 $L/ncu_source.csv
