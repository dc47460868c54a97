#!/usr/bin/env bash
# s38 r5 (G89): the MXFP8 FPROP / DGRAD twin whose scale warps write the scale products (four stages)
# against the five-stage pick -- the MXFP8 GEMM tests (every compiled configuration), the sweep
# alternating both at the per-rank EP2 sizes and qwen3_30b EP1, the MXFP8 suite on the twin, and
# the qwen3_30b MXFP8 layer with each (each alternated with our BF16 layer).
O=${OUT:-/tmp/o}; L=/tmp/s38r5; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
NCCL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
    -DDIST_MOE_NCCL_ROOT=$NCCL && cmake --build build-gpu -j 16 ) > $L/build.log 2>&1
for b in dist-moe tests/dist_moe_gpu_tests dmoe_launch bench/bench_grouped_gemm; do
  [ -x build-gpu/$b ] || { echo "missing $b"; tail -30 $L/build.log; exit 1; }; done
echo "build done at $((SECONDS-T0)) s"
timeout 120 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmMxfp8*:GroupedGemmArgs*' > $L/gemm_tests.log 2>&1
echo "mxfp8 gemm tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $L/gemm_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $L/gemm_tests.log | head -10
OPS=w13_fprop_mxfp8,w2_fprop_mxfp8,w13_dgrad_mxfp8,w2_dgrad_mxfp8
timeout 200 build-gpu/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral --routing balanced,random \
  --ops $OPS --sweep --sweep-match 128x128x128_s4 --rounds 3 --sustain-ms 100 > $L/gg_ep2.log 2>&1
echo "gg ep2 rc=$? at $((SECONDS-T0)) s"
timeout 80 build-gpu/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b --routing balanced,random \
  --ops $OPS --sweep --sweep-match 128x128x128_s4 --rounds 3 --sustain-ms 100 > $L/gg_ep1.log 2>&1
echo "gg ep1 rc=$? at $((SECONDS-T0)) s"
DMOE_GEMM_EXPERIMENTAL=1 timeout 60 build-gpu/dmoe_launch -n 1 --timeout 55 -- build-gpu/tests/dist_moe_mxfp8_pipeline_tests > $L/suite_mxfp8_wide.log 2>&1
echo "mxfp8 suite (wide) rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR' $L/suite_mxfp8_wide.log | head -1)"
n=0
for arm in A B A B; do
  n=$((n+1))
  if [ $arm = B ]; then export DMOE_GEMM_EXPERIMENTAL=1; else unset DMOE_GEMM_EXPERIMENTAL; fi
  f=$L/layer_qwen3_${n}_${arm}.log
  timeout 60 build-gpu/dist-moe bench --shape qwen3_30b --format mxfp8 --no-baseline --iters 5 --sustain-ms 100 > $f 2>&1
  echo "layer qwen3 $arm rc=$?: $(grep -E '^forward\+backward' $f | awk '{print $2}') ms; $(grep -E '^BF16 layer forward\+backward' $f | awk '{print $4, $5}')"
done
unset DMOE_GEMM_EXPERIMENTAL
echo "--- pick (s5) vs twin (s4), dynamic schedule: ms ---"
for f in $L/gg_ep2.log $L/gg_ep1.log; do grep -E "^fp8 .*128x128x128_s[45]_tma_dyn " $f | sed -E 's/ +/ /g' | \
  awk '{for(i=1;i<=NF;i++) if($i=="ms"){print $2,$3,$4,$5,$(i-1); break}}'; done
