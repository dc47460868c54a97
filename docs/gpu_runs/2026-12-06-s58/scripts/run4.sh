#!/usr/bin/env bash
# s58 r4: the tree with G121's scale permute landed (r2 / r3 ran it as a patch): the NVFP4 GEMM,
# Mega and quantizer gtests, the NVFP4 layer suite, the torch NVFP4 and Mega files; the trap rows
# with the MXFP8 overflow at T=2048 (at T=512 one rank never overflows: r1, r3).
RUN_NAME=s58r4; source scripts/device_run_prelude.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
OUT=$L scripts/quick_build.sh dist_moe_gpu_tests dist_moe_native dist_moe_torch dmoe_launch dist_moe_nvfp4_pipeline_tests || exit 1
echo "built at $((SECONDS-T0)) s"
gtests nvfp4 'GroupedGemmNvfp4*:MegaNvfp4*:Nvfp4ExpandRows*:QuantizeNvfp4*' 150
timeout 200 build-gpu/dmoe_launch -n 1 --timeout 180 -- build-gpu/tests/dist_moe_nvfp4_pipeline_tests > $L/nvfp4_suite.log 2>&1
echo "nvfp4 suite rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|ERROR' $L/nvfp4_suite.log | head -3 | tr '\n' ' ')"
R=$PWD
(cd /tmp && PYTHONPATH=$R/python timeout 120 python3 -u -m pytest -v -p no:cacheprovider -rfE "$R/tests/torch/test_traps.py" > $L/traps.log 2>&1)
echo "test_traps rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/traps.log)"
grep -E "^FAILED|required_receive_rows" $L/traps.log | head -8
t=$(( $(left) - 20 )); [ $t -gt 60 ] && pytest_log nvfp4_mega $t "$R/tests/torch/test_nvfp4.py" "$R/tests/torch/test_mega.py"
