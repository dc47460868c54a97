#!/usr/bin/env bash
# s29 r2: why the FP8-blockwise FPROP / DGRAD run ~25% slower in the training layer than alone at the
# same EP1 sizes (r1: qwen3 W13 0.791 vs 0.602 ms, mixtral 2.984 vs 2.340). Nsight Compute on the
# same kernels in both programs (cycles, clocks, DRAM bytes, grid), then the GEMM bench with random rows.
O=${OUT:-/tmp/o}; L=/tmp/s29r2; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target dist-moe bench_grouped_gemm dmoe_launch >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
M="gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_elapsed.avg.per_second,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,sm__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum"
NCU="ncu --clock-control none --target-processes all --kernel-name-base demangled --kernel-name regex:Sm90Fp8BlockwiseMainloop --metrics $M --csv --page raw"
for s in qwen3_30b mixtral; do
  timeout 200 $NCU --launch-count 10 build-gpu/dist-moe bench --shape $s --format fp8_blockwise --no-baseline --iters 1 --sustain-ms 0 > $L/ncu_layer_$s.csv 2> $L/ncu_layer_$s.err
  echo "ncu layer $s rc=$? at $((SECONDS-T0)) s"
  for r in balanced random; do
    timeout 200 $NCU --launch-count 30 build-gpu/bench/bench_grouped_gemm --ep 1 --shapes $s --routing $r --rounds 1 --sustain-ms 0 --iters 2 \
      --ops w13_fprop_fp8,w2_dgrad_fp8 > $L/ncu_bench_${s}_$r.csv 2> $L/ncu_bench_${s}_$r.err
    echo "ncu bench $s $r rc=$? at $((SECONDS-T0)) s"
  done
done
timeout 200 build-gpu/bench/bench_grouped_gemm --ep 1 --shapes qwen3_30b,mixtral --routing random --rounds 2 --sustain-ms 100 \
  --ops w13_fprop_fp8,w2_fprop_fp8,w13_dgrad_fp8,w2_dgrad_fp8 > $L/gemm_ep1_random.log 2>&1
echo "gemm random rc=$? at $((SECONDS-T0)) s"; grep pick $L/gemm_ep1_random.log
python3 - <<'PY'
import csv, glob, os, re
for f in sorted(glob.glob('/tmp/s29r2/ncu_*.csv')):
    rows = [l for l in open(f) if l.startswith('"')]
    if len(rows) < 3: print(os.path.basename(f), 'no rows'); continue
    rd = list(csv.reader(rows)); hdr = rd[0]
    ix = {k: hdr.index(k) for k in hdr}
    print(os.path.basename(f))
    for r in rd[2:]:
        g = lambda k: r[ix[k]] if k in ix else '?'
        name = g('Kernel Name'); m = re.search(r'MainloopConfig<([^>]*)', name); short = (m.group(1) if m else name)[:70]
        print('  %s\n    grid %-5s us %-9s cycles %-10s GHz %-6s dramR GB %-7s dramW GB %-7s L2 GB %-7s sm%% %s' % (short, g('launch__grid_size'),
              g('gpu__time_duration.sum'), g('sm__cycles_elapsed.max'), g('sm__cycles_elapsed.avg.per_second'),
              g('dram__bytes_read.sum'), g('dram__bytes_write.sum'), g('lts__t_bytes.sum'), g('sm__throughput.avg.pct_of_peak_sustained_elapsed')))
PY
