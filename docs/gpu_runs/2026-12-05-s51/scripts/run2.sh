#!/usr/bin/env bash
# s51 r2: G115 A/B. A = this tree without g115_scale_products.patch, B = with it (the 128x256
# FP8-blockwise FPROP / DGRAD k loop computes each block's scale products before loading the next
# block's scales into the same registers). Both built here; FP8 GEMM picks alternated (3 rounds,
# qwen3_30b + mixtral EP2 sizes, balanced, each after 200 ms of its own load), the qwen3_30b
# FP8-blockwise training layer alternated (2 rounds); B's FP8 GEMM tests and FP8-blockwise training
# suite; ncu source page of B's W2 FPROP (is the in-loop wait on the scale load gone?).
# To rerun: apply ../g115_scale_products_dropped.patch to the tree first (B = the tree with it).
RUN_NAME=s51r2; source scripts/device_run_prelude.sh
D=docs/gpu_runs/2026-12-05-s51
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
rm -rf .abtree && mkdir .abtree && tar -cf - --exclude='./build*' --exclude='./.abtree*' . | tar -xf - -C .abtree
(cd .abtree && patch -s -R -p1 < ../$D/g115_scale_products_dropped.patch) || { echo "patch does not reverse"; exit 1; }
mkdir -p $L/A
(OUT=$L BUILD_DIR=build-gpu scripts/quick_build.sh dist-moe dmoe_launch bench_grouped_gemm dist_moe_gpu_tests \
   dist_moe_fp8_blockwise_training_tests) &
(cd .abtree && OUT=$L/A BUILD_DIR=build-ab scripts/quick_build.sh dist-moe dmoe_launch bench_grouped_gemm) &
wait
[ -x build-gpu/bench/bench_grouped_gemm ] && [ -x .abtree/build-ab/bench/bench_grouped_gemm ] || { echo "build failed"; tail -20 $L/build.log $L/A/build.log; exit 1; }
echo "built at $((SECONDS-T0)) s"
OPS=w13_fprop_fp8,w2_fprop_fp8,w13_dgrad_fp8,w2_dgrad_fp8
for r in 1 2 3; do
  for side in A B; do
    bin=build-gpu/bench/bench_grouped_gemm; [ $side = A ] && bin=.abtree/build-ab/bench/bench_grouped_gemm
    timeout 120 $bin --ep 2 --shapes qwen3_30b,mixtral --routing balanced --ops $OPS --sweep-match NONE \
      --iters 10 --sustain-ms 200 2>&1 | awk -v s=$side -v r=$r '$1 == "fp8" && $6 == "(pick)" {print "ROW", s, r, $0}' >> $L/gemm_rows.txt
  done
  echo "gemm round $r at $((SECONDS-T0)) s"
done
python3 - $L/gemm_rows.txt <<'PY' | tee $L/gemm_ab.txt
import collections, statistics, sys
ms, bf = collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    key = (f[1], f[5], f[7])            # side, shape, op
    ms[key].append(float(f[10])); bf[key].append(float(f[15]))
med = statistics.median
print(f"{'shape':10s} {'op':14s} {'A ms':>7s} {'B ms':>7s} {'B/A':>6s}  x BF16 A / B (BF16 timed beside each)")
for shape, op in sorted({k[1:] for k in ms}):
    a, b = ms[("A", shape, op)], ms[("B", shape, op)]
    if a and b:
        print(f"{shape:10s} {op:14s} {med(a):7.3f} {med(b):7.3f} {med(b) / med(a):6.3f}  "
              f"{med(bf[('A', shape, op)]) / med(a):.2f} / {med(bf[('B', shape, op)]) / med(b):.2f}   A {a} B {b}")
PY
for r in 1 2; do
  for side in A B; do
    b=build-gpu; [ $side = A ] && b=.abtree/build-ab
    timeout 90 $b/dist-moe bench --shape qwen3_30b --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_$side$r.log 2>&1
    echo "layer $side$r: $(grep -E '^forward\+backward' $L/layer_$side$r.log | awk '{print $2}') ms, BF16 $(grep -E '^BF16 layer forward\+backward' $L/layer_$side$r.log | awk '{print $4, $5}')"
  done
done
grep -hE "^fwd:w13|^fwd:w2 |^bwd:w2_dgrad|^bwd:w13_dgrad" $L/layer_A2.log $L/layer_B2.log
timeout 150 build-gpu/tests/dist_moe_gpu_tests --gtest_filter='GroupedGemmFp8*' > $L/tests_fp8.log 2>&1
echo "FP8 GEMM tests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/tests_fp8.log | tr '\n' ' ')"
timeout 200 build-gpu/dmoe_launch -n 1 --timeout 180 -- build-gpu/tests/dist_moe_fp8_blockwise_training_tests > $L/suite_fp8bw_train.log 2>&1
echo "FP8-blockwise training suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|ERROR' $L/suite_fp8bw_train.log | head -3 | tr '\n' ' ')"
[ "$(left)" -gt 60 ] || exit 0
K0='Sm90Fp8BlockwiseMainloop<dist_moe::gemm::MainloopConfig<\(dist_moe::gemm::GemmKind\)0, \(int\)128, \(int\)256'
timeout 100 ncu --clock-control none --kernel-name-base demangled -k "regex:$K0" --launch-skip 3 -c 1 \
  --section SourceCounters --section WarpStateStats -o $L/ncu_w2 \
  build-gpu/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b --routing balanced --ops w2_fprop_fp8 --sweep-match NONE --iters 4 --sustain-ms 0 > $L/ncu_w2_run.txt 2>&1
timeout 60 ncu --import $L/ncu_w2.ncu-rep --page source --csv --print-source cuda,sass > $L/ncu_w2_B_cuda_sass.csv 2>&1
echo "ncu rc=$? $(wc -l < $L/ncu_w2_B_cuda_sass.csv) lines at $((SECONDS-T0)) s"; rm -f $L/ncu_w2.ncu-rep
