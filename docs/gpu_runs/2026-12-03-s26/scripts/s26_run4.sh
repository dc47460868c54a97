#!/usr/bin/env bash
# Session 26 run 4: G61, the NVFP4 consumers' instruction diet (weight scales by the hardware E4M3
# conversion, the token boxes' address warp-uniform so the wgmma descriptors live in uniform
# registers): tests, SASS counts, A (.abtree = s26 HEAD) / B (this tree) alternated.
O=${OUT:-/tmp/o}; L=/tmp/s26r4; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
OUT=$L/chk DMOE_STAGES="build" scripts/gpu_check.sh > $L/chk.txt 2>&1; tail -1 $L/chk.txt
cmake -S .abtree -B build-ab -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build_A.log 2>&1 &&
  cmake --build build-ab -j 16 --target dist-moe >> $L/build_A.log 2>&1 || { tail -20 $L/build_A.log; exit 1; }
echo "builds done at $((SECONDS-T0)) s"
timeout 200 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmNvfp4*:Nvfp4ExpandRows*:QuantizeNvfp4*' > $L/gemm_tests.log 2>&1
echo "nvfp4 gemm tests rc=$?"; grep -E "^\[  FAILED|PASSED|tests ran" $L/gemm_tests.log | tail -6
for side in A B; do
  d=build-gpu; [ $side = A ] && d=build-ab
  cuobjdump -sass $d/libdist_moe_gemm.a | python3 -c "
import sys
cur=None; n={}
for line in sys.stdin:
    if 'Function :' in line:
        cur = 'w13' if ('Sm90Nvfp4SwapABMainloop' in line and 'Li256ELi16E' in line and 'Swiglu' in line) else ('w2' if ('Sm90Nvfp4SwapABMainloop' in line and 'Li256ELi16E' in line) else None)
        continue
    if cur:
        for op in ('R2UR','HGMMA','IMAD.MOV','SHFL','F2FP','PRMT','LOP3','HMUL2'):
            if op in line: n[(cur,op)]=n.get((cur,op),0)+1
print('$side', ' '.join(f'{k[0]}:{k[1]}={v}' for k,v in sorted(n.items())))
"
done
b() { timeout 90 $1/dist-moe bench --shape $2 --format nvfp4 --mode infer --no-baseline --iters 10 --sustain-ms 50; }
for r in 1 2 3; do
  for side in A B; do
    d=build-gpu; [ $side = A ] && d=build-ab
    b $d dsv3_decode > $L/ab_${side}_$r.log 2>&1
    echo "$side r$r: $(grep -E '^fwd:w13  ' $L/ab_${side}_$r.log | head -1 | awk '{print "w13",$2}') $(grep -E '^fwd:w2  ' $L/ab_${side}_$r.log | head -1 | awk '{print "w2",$2}') $(grep -E '^inference forward' $L/ab_${side}_$r.log | awk '{print "fwd",$3}') $(grep -E '^BF16 layer' $L/ab_${side}_$r.log | awk '{print "bf16",$4, $5}')"
  done
done
for side in A B; do
  d=build-gpu; [ $side = A ] && d=build-ab
  b $d dsv3_prefill > $L/ab_prefill_$side.log 2>&1
  echo "prefill $side: $(grep -E '^fwd:w13  ' $L/ab_prefill_$side.log | head -1 | awk '{print "w13",$2}') $(grep -E '^fwd:w2  ' $L/ab_prefill_$side.log | head -1 | awk '{print "w2",$2}') $(grep -E '^inference forward' $L/ab_prefill_$side.log | awk '{print "fwd",$3}') $(grep -E '^BF16 layer' $L/ab_prefill_$side.log | awk '{print "bf16",$4, $5}')"
done
echo "ab done at $((SECONDS-T0)) s"
for side in A B; do
  d=build-gpu; [ $side = A ] && d=build-ab
  timeout 100 ncu --kernel-name-base demangled -k "regex:Nvfp4SwapAB" -c 2 --metrics smsp__inst_executed.sum,sm__cycles_elapsed.avg,smsp__issue_active.avg.pct_of_peak_sustained_active \
    $d/dist-moe bench-rank --shape dsv3_decode --format nvfp4 --mode infer --iters 2 > $L/ncu_$side.txt 2>&1
  echo "ncu $side: $(grep -E 'smsp__inst_executed.sum|sm__cycles_elapsed.avg|issue_active' $L/ncu_$side.txt | awk '{print $1, $NF}' | tr '\n' ' ')"
done
OUT=$L/st DMOE_STAGES="nvfp4 torch" TORCH_TESTS="tests/torch/test_nvfp4.py" TORCH_EXAMPLES="block_scaled_inference" scripts/gpu_check.sh > $L/st.txt 2>&1
sed -n '/=== summary/,$p' $L/st.txt | grep -E "nvfp4|test_nvfp4|block_scaled|rc=" | head -8
