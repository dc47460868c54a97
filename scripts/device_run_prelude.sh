# Sourced by the one-call device run scripts (docs/gpu_runs/*/scripts/run*.sh) after they set
# RUN_NAME: logs in L=/tmp/$RUN_NAME, packed into $OUT/logs.tar.gz when the script exits; the torch
# venv's NCCL first on the library path (the system's older one clashes), NVLink multicast off;
# T0 and left() (seconds before the BUDGET mark, default 540 s, past which scripts start no new step:
# set BUDGET lower for a call with less device time left); gtests, torch_tests, ncu_pages, reversed_tree,
# ab_patch_trees, layer_suite, suite_margins, mxfp8_gemm_table, training_layers, ncu_counts, wgrad_sweep and the
# A / B round helpers (below).
O=${OUT:-/tmp/o}; L=/tmp/${RUN_NAME:?set RUN_NAME before sourcing}; mkdir -p "$O" "$L"
export LD_LIBRARY_PATH=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
T0=$SECONDS
finish() { tar -czf "$O/logs.tar.gz" -C "$L" . ; echo "all done at $((SECONDS - T0)) s"; }
trap finish EXIT
left() { echo $((${BUDGET:-540} - (SECONDS - T0))); }

# torch_tests FILE...: tests/torch within BUDGET seconds of T0 (default 540): each named file (no
# .py) alone, with what is left, then the rest of tests/torch; logs $L/FILE.log and
# $L/torch_rest.log, one line per pytest call and its FAILED / ERROR lines.
torch_tests() {
  local budget=${BUDGET:-540} R=$PWD t f ign=""
  export PYTHONPATH=$R/python
  for f in "$@"; do
    t=$(( budget - (SECONDS - T0) - 15 )); [ $t -gt 40 ] || break
    pytest_log "$f" $t "$R/tests/torch/$f.py"
  done
  for f in "$@"; do ign="$ign --ignore $R/tests/torch/$f.py"; done
  t=$(( budget - (SECONDS - T0) - 15 ))
  [ $t -gt 60 ] || return 0
  pytest_log torch_rest $t "$R/tests/torch" $ign
}

# pytest_log NAME TIMEOUT PYTEST-ARGS...: pytest (from /tmp, quiet, the repo's python/ on the path)
# within TIMEOUT seconds into $L/NAME.log; one line with its rc and summary, then its FAILED / ERROR
# lines. Paths in PYTEST-ARGS must be absolute.
pytest_log() {
  local name=$1 limit=$2; shift 2
  (cd /tmp && PYTHONPATH=$OLDPWD/python timeout $limit python3 -m pytest -q -p no:cacheprovider -rfE "$@" \
     > $L/$name.log 2>&1)
  echo "$name rc=$? at $((SECONDS-T0)) s: $(tail -1 $L/$name.log)"
  grep -E "^(FAILED|ERROR)" $L/$name.log | head -20
}

# ncu_pages TAG [N]: the report $L/TAG.ncu-rep as text -- $L/ncu_TAG_details.txt, the source page
# ($L/ncu_TAG_page.csv.gz) and its N (30) busiest CUDA lines ($L/ncu_TAG_by_line.txt,
# scripts/ncu_by_line.py) -- then the report is removed (large).
ncu_pages() {
  local tag=$1 n=${2:-30}
  timeout 60 ncu --import $L/$tag.ncu-rep --page details > $L/ncu_${tag}_details.txt 2>&1
  timeout 60 ncu --import $L/$tag.ncu-rep --page source --csv --print-source cuda,sass > $L/ncu_${tag}_page.csv 2>&1
  python3 scripts/ncu_by_line.py $L/ncu_${tag}_page.csv $n > $L/ncu_${tag}_by_line.txt 2>&1
  gzip -f $L/ncu_${tag}_page.csv; rm -f $L/$tag.ncu-rep
}

# gtests NAME FILTER [TIMEOUT]: build-gpu's GPU gtests matching FILTER into $L/gtest_NAME.log; one line
# with the pass / fail counts and the first failing tests' names.
gtests() {
  local name=$1 filter=$2 limit=${3:-150}
  timeout $limit build-gpu/tests/dist_moe_gpu_tests --gtest_color=no --gtest_filter="$filter" > $L/gtest_$name.log 2>&1
  echo "$name gtests rc=$? at $((SECONDS-T0)) s: $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' $L/gtest_$name.log | tr '\n' ' ')"
  grep -E '^\[  FAILED' $L/gtest_$name.log | head -8
}

# suite_margins LABEL TEST LIMIT: suite_cases LABEL TEST LIMIT into $L/cases_LABEL.txt, then its first line and
# one line of every case's largest forward relL2 against the oracle ("case: margin").
suite_margins() {
  suite_cases "$1" "$2" "$3" > "$L/cases_$1.txt"
  head -1 "$L/cases_$1.txt"
  grep -o "case [A-Za-z0-9_]* ([^)]*) \[max relL2 vs [a-z0-9_]* oracle: out [0-9.e+-]*" "$L/cases_$1.txt" |
    sed -E 's/ \([^)]*\) \[max relL2 vs [a-z0-9_]* oracle: out/:/; s/^case //' | tr '\n' ' '; echo
}

# mxfp8_gemm_table [TIMEOUT]: build-gpu's 12-row MXFP8 GEMM table as the training layer runs it (EP2 sizes,
# balanced, two rounds, each pick against our BF16 pick) into $L/gemm_table.log; a line per pick: shape op ms
# x-bf16.
mxfp8_gemm_table() {
  timeout "${1:-120}" build-gpu/bench/bench_grouped_gemm --shapes qwen3_30b,mixtral,dsv3_prefill --ep 2 --routing balanced \
    --ops w13_fprop_mxfp8s,w2_fprop_mxfp8s,w13_dgrad_mxfp8s,w2_dgrad_mxfp8s --rounds 2 --iters 5 --sustain-ms 100 \
    --sweep-match no_sweep > "$L/gemm_table.log" 2>&1
  echo "gemm table rc=$? at $((SECONDS-T0)) s (shape op ms x-bf16):"
  grep -E "^fp8 .*\(pick\)" "$L/gemm_table.log" |
    awk '{for (i = 1; i <= NF; i++) if ($i == "x" && $(i + 1) == "bf16") r = $(i + 2); print $2, $4, $7, r}'
}

# training_layers FORMAT: build-gpu's FORMAT training layer beside our BF16 layer (one process each, 3 iterations
# after 100 ms of its own load) at qwen3_30b, mixtral and dsv3_prefill (128 experts) into $L/layer_SHAPE.log, while
# the BUDGET mark allows; a line each: forward+backward, the BF16 layer's and the saved-activation lines.
training_layers() {
  local fmt=$1 args shape limit
  for args in "qwen3_30b 60" "mixtral 80" "dsv3_prefill 100 --experts 128"; do
    set -- $args
    shape=$1 limit=$2; shift 2
    [ "$(left)" -gt "$limit" ] || break
    timeout "$limit" build-gpu/dist-moe bench --shape "$shape" "$@" --format "$fmt" --no-baseline --iters 3 \
      --sustain-ms 100 > "$L/layer_$shape.log" 2>&1
    echo "$fmt $shape rc=$?: $(grep -E '^forward\+backward|^BF16 layer forward\+backward|saved' "$L/layer_$shape.log" |
      sed -E 's/ +/ /g' | tr '\n' ';')"
  done
}

# ncu_counts TAG KERNEL-REGEX PROGRAM ARGS...: one launch (after NCU_SKIP [1] of them) of the kernels matching
# KERNEL-REGEX under ncu -- warp instructions executed, duration, ALU pipe, DRAM throughput, registers, warps
# active -- into $L/ncu_TAG.txt; one line.
ncu_counts() {
  local tag=$1 k=$2; shift 2
  timeout 60 ncu --clock-control none --kernel-name-base demangled -k "regex:$k" --launch-skip "${NCU_SKIP:-1}" -c 1 \
    --metrics smsp__inst_executed.sum,gpu__time_duration.sum,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
    "$@" > "$L/ncu_$tag.txt" 2>&1
  echo "ncu $tag: $(grep -E "$k|inst_executed|duration|pipe_alu|dram__|registers|warps_active|==ERROR" "$L/ncu_$tag.txt" |
    grep -v '==PROF==' | sed -E 's/ +/ /g;s/void [^ ]*:://;s/\([^)]*\)//;s/, Context.*//' |
    sed -E 's/(sm|smsp|gpu|launch)__//;s/\.avg\.pct_of_peak_sustained_(active|elapsed)//;s/\.sum//' | tr '\n' ';' | cut -c1-400)"
}

# ab_patch_trees PATCH "B TARGETS" "A TARGETS": the A / B pair of a one-patch experiment -- PATCH
# applied to this checkout (B, build-gpu), A = this checkout without it (scripts/ab_trees.sh) -- both
# built; logs $L/build.log, $L/A/build.log. Exits the script (2: the patch does not apply, 1: a build
# failed) or prints the build time.
ab_patch_trees() {
  local patch=$1
  git apply "$patch" || { echo "$patch does not apply"; exit 2; }
  OUT=$L scripts/ab_trees.sh "$patch" "$2" "$3" || { tail -20 "$L/build.log" "$L/A/build.log"; exit 1; }
  echo "built at $((SECONDS-T0)) s"
}

# bs_picks LOG: each block-scaled decode GEMM's pick in a bench_grouped_gemm log ("bs" lines), as
# "op config ms ms, x copy R; " (the ratio: weight bytes per second against the HBM copy).
bs_picks() {
  grep '(pick)' "$1" | awk '{for (i = 1; i <= NF; i++) if ($i == "(pick)") printf "%s %s %s ms, x copy %s; ", $4, $(i - 1), $(i + 1), $(i + 9)}'
}

# gemm_pick_rounds LABEL N "ARMS" BENCH-GEMM-ARGS...: N rounds over ARMS of bench_grouped_gemm
# BENCH-GEMM-ARGS from $(arm_dir ARM) into $L/gemm_LABEL_<arm><round>.log, one line each: the
# block-scaled picks (bs_picks). Starts no run with less than 35 s left.
gemm_pick_rounds() {
  local label=$1 n=$2 arms=$3 r arm f; shift 3
  for r in $(seq 1 "$n"); do
    for arm in $arms; do
      [ "$(left)" -lt 35 ] && return
      f=$L/gemm_${label// /_}_$arm$r.log
      timeout "${ARM_TIMEOUT:-60}" "$(arm_dir "$arm")/bench/bench_grouped_gemm" "$@" > "$f" 2>&1
      echo "gemm $label $arm$r: $(bs_picks "$f")"
    done
  done
}

# layer_suite LABEL TEST ARM [TIMEOUT]: a layer suite against the CPU oracle, $(arm_dir ARM)/tests/TEST (one
# rank, dmoe_launch of build-gpu), into $L/suite_LABEL_ARM.log; one line with its verdict.
layer_suite() {
  local label=$1 test=$2 arm=$3 limit=${4:-200}
  timeout "$limit" build-gpu/dmoe_launch -n 1 --timeout $((limit - 10)) -- \
    "$(arm_dir "$arm")/tests/$test" > "$L/suite_${label}_$arm.log" 2>&1
  echo "$label suite $arm rc=$? at $((SECONDS-T0)) s: $(grep -E 'ALL PASS|FAILED:|FAIL case|ERROR|TIMEOUT' \
    "$L/suite_${label}_$arm.log" | head -3 | tr '\n' ' ')"
}

# suite_cases LABEL TEST LIMIT: layer_suite LABEL TEST B within LIMIT seconds (less if the BUDGET mark is
# nearer; skipped with 40 s or less left), then each case's line: PASS / FAIL, its seconds and its margins.
suite_cases() {
  local label=$1 test=$2 limit=$3
  [ "$(left)" -gt 40 ] || return 0
  [ "$limit" -lt "$(left)" ] || limit=$(( $(left) - 10 ))
  layer_suite "$label" "$test" B "$limit"
  grep -E "PASS case|FAIL case" "$L/suite_${label}_B.log" | sed -E 's/^(\[rank 0\] )+//'
}

# nvfp4_suite ARM [TIMEOUT]: the NVFP4 layer suite (layer_suite nvfp4 ...).
nvfp4_suite() { layer_suite nvfp4 dist_moe_nvfp4_pipeline_tests "$@"; }

# wgrad_sweep LABEL [TIMEOUT] BENCH-GEMM-ARGS...: build-gpu's bench_grouped_gemm sweep of the FP8-blockwise
# WGRAD tiles (BF16 gradients accumulated, as the layers add them) into $L/sweep_LABEL.log; one line with
# its rc, then one per shape and op: the pick and the _dyn rows (the layers' accumulating WGRADs take the
# dynamic schedule), each with its time against our BF16 WGRAD.
wgrad_sweep() {
  local label=$1 limit=$2 f=$L/sweep_$1.log; shift 2
  timeout "$limit" build-gpu/bench/bench_grouped_gemm --routing balanced --ops w13_wgrad_fp8,w2_wgrad_fp8 \
    --wgrad-accumulate --fp8-wgrad-bf16 --sweep "$@" > "$f" 2>&1
  echo "sweep $label rc=$? at $((SECONDS-T0)) s"
  awk '$1 == "fp8" && ($5 == "pick" || $6 ~ /_dyn$/) {printf "  %s %s %s %s ms (x bf16 %s)\n", $2, $4,
    ($5 == "pick" ? "pick" : $6), ($5 == "pick" ? $10 : $7), ($5 == "pick" ? $19 : $16)}' "$f"
}

# env_arm DIR ASSIGNMENT PROGRAM...: an arm of build-gpu's binaries run under one environment
# assignment (e.g. DMOE_GEMM_EXPERIMENTAL=1): DIR/PROGRAM wrappers for each PROGRAM (a path under
# build-gpu), for arm_dir to name.
env_arm() {
  local dir=$1 assignment=$2 prog; shift 2
  for prog in "$@"; do
    mkdir -p "$dir/$(dirname "$prog")"
    printf '#!/bin/sh\n%s exec %s/build-gpu/%s "$@"\n' "$assignment" "$PWD" "$prog" > "$dir/$prog"
    chmod +x "$dir/$prog"
  done
}

# arm_dir ARM: the build folder of arm A (.abtree/build-ab, scripts/ab_trees.sh), B (build-gpu) or C
# (.abtree_c/build-c, a third tree the script builds); a script may redefine it.
arm_dir() { case $1 in A) echo .abtree/build-ab;; B) echo build-gpu;; C) echo .abtree_c/build-c;; esac; }

# reversed_tree DIR BUILD_DIR LOG_DIR "TARGETS" PATCH...: a copy of this checkout in DIR with each
# PATCH reversed in turn (scripts/ab_trees.sh --tree-only), its TARGETS built into DIR/BUILD_DIR in
# the background (LOG_DIR/build.log); the build's pid in REVERSED_TREE_PID. Returns 1 when a patch
# does not reverse. E.g. a third arm: reversed_tree .abtree_c build-c $L/C "dist-moe" X.patch Y.patch
reversed_tree() {
  local dir=$1 bdir=$2 logdir=$3 targets=$4
  shift 4
  A_TREE=$dir scripts/ab_trees.sh --tree-only "$@" || return 1
  mkdir -p "$logdir"
  # shellcheck disable=SC2086  # the targets are words
  (cd "$dir" && OUT=$logdir BUILD_DIR=$bdir scripts/quick_build.sh $targets > /dev/null) &
  REVERSED_TREE_PID=$!
}

# arm_rounds LABEL N "ARMS" LINES-REGEX PROGRAM ARGS...: N rounds over ARMS (e.g. "A B C"), each arm
# running $(arm_dir ARM)/PROGRAM ARGS into $L/LABEL_<arm><round>.log and printing one line: the
# log's lines matching LINES-REGEX, nine fields each. Starts no run with less than 35 s left; each
# run gets ARM_TIMEOUT seconds (60).
arm_rounds() {
  local label=$1 n=$2 arms=$3 lines=$4 prog=$5 r arm f; shift 5
  for r in $(seq 1 "$n"); do
    for arm in $arms; do
      [ "$(left)" -lt 35 ] && return
      f=$L/${label// /_}_$arm$r.log
      timeout "${ARM_TIMEOUT:-60}" "$(arm_dir "$arm")/$prog" "$@" > "$f" 2>&1
      echo "$label $arm$r: $(grep -E "$lines" "$f" | sed -E 's/ +/ /g' | cut -d' ' -f1-9 | tr '\n' ';')"
    done
  done
}

# ab_layer_rounds LABEL N LINES-REGEX BENCH-ARGS...: arm_rounds of `dist-moe bench BENCH-ARGS`, side A
# then side B.
ab_layer_rounds() {
  local label=$1 n=$2 lines=$3; shift 3
  arm_rounds "$label" "$n" "A B" "$lines" dist-moe bench "$@"
}

# mega_rounds FORMAT DECODE_ROUNDS T128_ROUNDS: ab_layer_rounds of the Mega inference layer against the
# staged layer (alternated in one process) at dsv3_decode and at qwen3_30b T = 128, FORMAT nvfp4 or mxfp8.
mega_rounds() {
  local fmt=$1 lines='^(inference forward|staged layer|BF16 layer) |^fwd:mega .*GB'
  ab_layer_rounds "mega $fmt dsv3_decode" "$2" "$lines" --shape dsv3_decode --mode infer --format "$fmt" \
    --no-baseline --iters 10 --sustain-ms 50 --pipeline mega
  ab_layer_rounds "mega $fmt qwen3 T128" "$3" "$lines" --shape qwen3_30b --tokens 128 --mode infer --format "$fmt" \
    --no-baseline --iters 20 --sustain-ms 50 --pipeline mega
}
