#!/usr/bin/env bash
# s61 r1: G127 A/B on any card. A = this tree without ../g127_quarters.patch, B = this tree (the
# FP8-blockwise 128x256 FPROP / DGRAD in pipelined 64-column quarters). B's FP8 GEMM gtests and
# FP8-blockwise training suite; the FP8 GEMM picks alternated (qwen3_30b, mixtral, dsv3_prefill EP2
# sizes, balanced, each after 200 ms of its own load, our BF16 pick timed beside it); the qwen3_30b
# FP8-blockwise training layer alternated. On an H200 first: G126's owed A / B (C = this tree without
# ../g126_code_at_s60_head.patch, the NVFP4 weight order): the dsv3_decode NVFP4 layers and decode GEMMs.
RUN_NAME=s61r1; source scripts/device_run_prelude.sh
D=docs/gpu_runs/2026-12-06-s61
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
h200=0; [[ $gpu == *H200* ]] && h200=1
if [ $h200 = 1 ]; then
  rm -rf .abtree_c && mkdir -p .abtree_c && tar -cf - --exclude='./build*' --exclude='./.abtree*' . | tar -xf - -C .abtree_c
  (cd .abtree_c && patch -s -R -p1 < ../$D/g126_code_at_s60_head.patch) || { echo "C: G126 does not reverse"; exit 1; }
  (cd .abtree_c && OUT=$L/C BUILD_DIR=build-c scripts/quick_build.sh dist-moe bench_grouped_gemm) > $L/c_build.txt 2>&1 &
  c=$!
fi
OUT=$L scripts/ab_trees.sh $PWD/$D/g127_quarters.patch \
  "dist-moe dmoe_launch bench_grouped_gemm dist_moe_gpu_tests dist_moe_fp8_blockwise_training_tests" \
  "dist-moe bench_grouped_gemm" || { tail -20 $L/build.log $L/A/build.log; exit 1; }
[ $h200 = 1 ] && { wait $c || { tail -20 $L/c_build.txt; exit 1; }; }
echo "built at $((SECONDS-T0)) s"
if [ $h200 = 1 ]; then  # G126 on the H200: C = before, B = after
  decode="--shape dsv3_decode --mode infer --format nvfp4 --no-baseline --iters 10 --sustain-ms 50"
  arm_rounds "nvfp4 staged" 2 "C B" '^(inference forward|BF16 layer) |^fwd:w(13|2) .*GB' dist-moe bench $decode
  arm_rounds "nvfp4 mega" 2 "C B" '^(inference forward|staged layer|BF16 layer) |^fwd:mega .*GB' dist-moe bench $decode --pipeline mega
  for r in 1 2; do
    for arm in C B; do
      f=$L/nvfp4_gemm_$arm$r.log
      timeout 60 $(arm_dir $arm)/bench/bench_grouped_gemm --shapes dsv3_decode --ep 1 --routing balanced \
        --ops w13_fprop_nvfp4x,w2_fprop_nvfp4x --iters 10 --sustain-ms 100 > $f 2>&1
      echo "nvfp4 gemm $arm$r: $(bs_picks $f)"
    done
  done
fi
gtests fp8 'GroupedGemmFp8*' 150
timeout 200 build-gpu/dmoe_launch -n 1 --timeout 180 -- build-gpu/tests/dist_moe_fp8_blockwise_training_tests > $L/suite_fp8bw_train.log 2>&1
echo "FP8-blockwise training suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|ERROR' $L/suite_fp8bw_train.log | head -3 | tr '\n' ' ')"
OPS=w13_fprop_fp8,w2_fprop_fp8,w13_dgrad_fp8,w2_dgrad_fp8
for r in 1 2; do
  for side in A B; do
    [ "$(left)" -lt 150 ] && break 2
    timeout 120 $(arm_dir $side)/bench/bench_grouped_gemm --ep 2 --shapes qwen3_30b,mixtral,dsv3_prefill --routing balanced \
      --ops $OPS --sweep-match NONE --iters 10 --sustain-ms 200 > $L/gemm_$side$r.log 2>&1
    awk -v s=$side -v r=$r '$1 == "fp8" && $6 == "(pick)" {print "ROW", s, r, $0}' $L/gemm_$side$r.log >> $L/gemm_rows.txt
  done
  echo "gemm round $r at $((SECONDS-T0)) s"
done
python3 - $L/gemm_rows.txt <<'PY' | tee $L/gemm_ab.txt
import collections, statistics, sys
ms, bf = collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):  # ROW side round fp8 shape routing op config (pick) ms ms ... bf16 ms ms ...
    f = line.split()
    key = (f[1], f[4], f[6])            # side, shape, op
    ms[key].append(float(f[f.index("(pick)") + 1])); bf[key].append(float(f[f.index("bf16") + 1]))
med = statistics.median
print(f"{'shape':12s} {'op':14s} {'A ms':>7s} {'B ms':>7s} {'B/A':>6s}  x BF16 A / B (BF16 timed beside each)")
for shape, op in sorted({k[1:] for k in ms}):
    a, b = ms[("A", shape, op)], ms[("B", shape, op)]
    if a and b:
        print(f"{shape:12s} {op:14s} {med(a):7.3f} {med(b):7.3f} {med(b) / med(a):6.3f}  "
              f"{med(bf[('A', shape, op)]) / med(a):.2f} / {med(bf[('B', shape, op)]) / med(b):.2f}   A {a} B {b}")
PY
for r in 1 2; do
  for side in A B; do
    [ "$(left)" -lt 40 ] && break 2
    timeout 90 $(arm_dir $side)/dist-moe bench --shape qwen3_30b --format fp8_blockwise --no-baseline --iters 5 --sustain-ms 100 > $L/layer_$side$r.log 2>&1
    echo "layer $side$r: $(grep -E '^forward\+backward' $L/layer_$side$r.log | awk '{print $2}') ms, BF16 $(grep -E '^BF16 layer forward\+backward' $L/layer_$side$r.log | awk '{print $4, $5}')"
  done
done
