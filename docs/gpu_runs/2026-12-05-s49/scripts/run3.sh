#!/usr/bin/env bash
# s49 run 3: G109's lens on the GEMMs. One launch each of the MXFP8 FPROP / DGRAD picks (qwen3_30b
# and mixtral EP2 sizes), the FP8-blockwise WGRAD into BF16 gradients (qwen3_30b EP1, accumulating:
# the layer's case) and the NVFP4 decode GEMMs on expanded rows (dsv3_decode EP1) under ncu's source
# counters: L2 sectors and shared wavefronts against their ideal, the instructions with the most
# excess and the most stall samples. On an H200 also the quantizer table. RUN3_BUDGET_S: device time.
RUN_NAME=s49r3; source scripts/device_run_prelude.sh
left() { echo $((${RUN3_BUDGET_S:-540} - (SECONDS - T0))); }
S=docs/gpu_runs/2026-12-05-s49/scripts
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
targets="bench_grouped_gemm"; [[ $gpu == *H200* ]] && targets="$targets bench_quantize"
OUT=$L scripts/quick_build.sh $targets || exit 1
echo "built at $((SECONDS-T0)) s"
if [[ $gpu == *H200* ]]; then
  timeout 100 build-gpu/bench/bench_quantize --shapes dsv3_prefill,qwen3_30b --iters 20 --sustain-ms 100 > $L/quantize.log 2>&1
  echo "bench_quantize rc=$? at $((SECONDS-T0)) s"; sed -n '/^summary/,$p' $L/quantize.log; grep -A4 'layer quantize_x' $L/quantize.log
fi
# name : kernel regex : launches to skip : bench arguments
for spec in "mxfp8_w13_fprop_qwen3:Mxfp8Mainloop:2:--ep 2 --shapes qwen3_30b --routing balanced --ops w13_fprop_mxfp8" \
            "mxfp8_w2_dgrad_qwen3:Mxfp8Mainloop:2:--ep 2 --shapes qwen3_30b --routing balanced --ops w2_dgrad_mxfp8" \
            "mxfp8_w13_fprop_mixtral:Mxfp8Mainloop:2:--ep 2 --shapes mixtral --routing balanced --ops w13_fprop_mxfp8" \
            "fp8_w13_wgrad_qwen3:Fp8BlockwiseMainloop:2:--ep 1 --shapes qwen3_30b --routing balanced --ops w13_wgrad_fp8 --fp8-wgrad-bf16 --wgrad-accumulate" \
            "nvfp4x_w13_decode:Nvfp4SwapABMainloop:2:--ep 1 --shapes dsv3_decode --routing random --ops w13_fprop_nvfp4x" \
            "nvfp4x_w2_decode:Nvfp4SwapABMainloop:2:--ep 1 --shapes dsv3_decode --routing random --ops w2_fprop_nvfp4x"; do
  [ "$(left)" -gt 40 ] || break
  IFS=: read -r name kre skip args <<< "$spec"
  timeout 75 ncu --kernel-name-base demangled -k "regex:sm90_grouped_gemm<.*$kre" -s $skip -c 1 --section SpeedOfLight \
    --section WarpStateStats --section SourceCounters -o $L/ncu_$name build-gpu/bench/bench_grouped_gemm $args --rounds 1 \
    --sustain-ms 0 --iters 3 > $L/ncu_$name.txt 2>&1
  rc=$?
  timeout 25 ncu --import $L/ncu_$name.ncu-rep --page source --csv --print-source sass > $L/source_$name.csv 2>/dev/null
  timeout 20 ncu --import $L/ncu_$name.ncu-rep --page details > $L/details_$name.txt 2>/dev/null
  echo "== $name (rc=$rc at $((SECONDS-T0)) s): $(grep -m1 -oE 'sm90_grouped_gemm<.{0,40}' $L/details_$name.txt) $(grep -E '^\s+(Duration|DRAM Throughput|Issue Slots Busy|Warp Cycles Per Issued Instruction)' $L/details_$name.txt | tr -s ' ' | tr '\n' ';')"
  python3 $S/ncu_source_summary.py $L/source_$name.csv | tail -n +2
done
