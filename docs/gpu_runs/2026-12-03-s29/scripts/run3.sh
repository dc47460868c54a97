#!/usr/bin/env bash
# s29 r3: r2's Nsight Compute of the training layer profiled the rank processes but their CSV went
# into the launcher's pipe; here the reports go to files (-o, one per process) and are read back.
# Same metrics as r2's standalone kernels: cycles, clocks, DRAM and L2 bytes, grid, config.
O=${OUT:-/tmp/o}; L=/tmp/s29r3; mkdir -p $O $L
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$SECONDS
finish() { tar -czf $O/logs.tar.gz -C $L . ; echo "all done at $((SECONDS-T0)) s"; }
trap finish EXIT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" \
  -DDIST_MOE_NCCL_ROOT=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl > $L/build.log 2>&1 &&
  cmake --build build-gpu -j 16 --target dist-moe dmoe_launch >> $L/build.log 2>&1 || { tail -20 $L/build.log; exit 1; }
echo "build done at $((SECONDS-T0)) s"
M="gpu__time_duration.sum,sm__cycles_elapsed.max,sm__cycles_elapsed.avg.per_second,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,sm__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum"
for s in qwen3_30b mixtral; do
  mkdir -p $L/rep_$s
  timeout 240 ncu --clock-control none --target-processes all --kernel-name-base demangled \
    --kernel-name regex:Fp8BlockwiseMainloop --launch-skip 8 --launch-count 8 --metrics $M -o $L/rep_$s/r_%p \
    build-gpu/dist-moe bench --shape $s --format fp8_blockwise --no-baseline --iters 1 --sustain-ms 0 > $L/layer_$s.log 2>&1
  echo "ncu layer $s rc=$? at $((SECONDS-T0)) s: $(ls $L/rep_$s)"
  for f in $L/rep_$s/*.ncu-rep; do ncu --import $f --csv --page raw > ${f%.ncu-rep}.csv 2>&1; done
done
python3 - <<'PY'
import csv, glob, os, re
for f in sorted(glob.glob('/tmp/s29r3/rep_*/*.csv')):
    rows = [l for l in open(f) if l.startswith('"')]
    if len(rows) < 3: print(f, 'no rows'); continue
    rd = list(csv.reader(rows)); hdr = rd[0]; ix = {k: hdr.index(k) for k in hdr}
    print(f)
    for r in rd[2:]:
        g = lambda k: r[ix[k]] if k in ix else '?'
        name = g('Kernel Name'); m = re.search(r'(Sm90\w*Mainloop)<dist_moe::gemm::MainloopConfig<([^>]*)', name)
        short = (m.group(1) + ' ' + m.group(2)) if m else name[:60]
        print('  %s\n    grid %-5s ns %-9s cycles %-10s Hz %-16s dramR %-13s dramW %-13s L2 %-15s sm%% %s' % (short[:110], g('launch__grid_size'),
              g('gpu__time_duration.sum'), g('sm__cycles_elapsed.max'), g('sm__cycles_elapsed.avg.per_second'),
              g('dram__bytes_read.sum'), g('dram__bytes_write.sum'), g('lts__t_bytes.sum'), g('sm__throughput.avg.pct_of_peak_sustained_elapsed')))
PY
