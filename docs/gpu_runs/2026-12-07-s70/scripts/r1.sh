#!/usr/bin/env bash
# s70 r1: s69's r3 (G144: the top-k backward's grad_out token rows + FP32 route scores left to the
# block-scaled quantizer; the patch is applied for B and reversed for A -- the steps and their budget
# in docs/gpu_runs/2026-12-07-s69/scripts/r3.sh, the prediction in perf_history G144), with G145's first
# step right after the build: `bench_wgmma_rate --wgrad`, the FP8 WGRAD's k loop with its per-element
# fold -- main's serial slices, the fold under the next slice, one tile per warpgroup -- in alternated
# rounds (perf_history G145's step-1 prediction), the wgmma rate table with the E4M3 RS rows, and
# `bench_gradient_stores`: the accumulating WGRAD epilogue's TMA stores / reduce-adds alone against the
# copy (perf_history G146).
RUN_NAME=s70r1
B_EXTRA_TARGETS="bench_wgmma_rate bench_gradient_stores"
after_build() {
  timeout 60 build-gpu/bench/bench_wgmma_rate --wgrad --rounds 3 > "$L/wgrad_kloop.log" 2>&1
  echo "bench_wgmma_rate --wgrad rc=$?"; cat "$L/wgrad_kloop.log"
  timeout 60 build-gpu/bench/bench_wgmma_rate --iters 2000 > "$L/wgmma_rate.log" 2>&1
  echo "bench_wgmma_rate rc=$?"; grep -E "^e4m3" "$L/wgmma_rate.log"
  timeout 60 build-gpu/bench/bench_gradient_stores --rounds 2 --iters 5 > "$L/gradient_stores.log" 2>&1
  echo "bench_gradient_stores rc=$?"; cat "$L/gradient_stores.log"
}
source docs/gpu_runs/2026-12-07-s69/scripts/r3.sh
