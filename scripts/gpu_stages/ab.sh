# shellcheck shell=bash
# Stages treeab, ab, patchab of scripts/gpu_check.sh (sourced; see its header): interleaved A/B runs,
# A B A B ..., so that clock drift under sustained load hits both sides alike.
#   treeab   an older source tree (A) against this checkout (B), for changes no environment variable
#            can switch (behaviour-unchanged refactors: every layer time within a few percent). A_TREE
#            [.abtree]: the older tree unpacked into an ignored folder (`git archive BASE | tar -x -C
#            .abtree`, carried with the call); or A_PATCH: a patch this checkout contains, and A is the
#            checkout copied to A_TREE with it reversed (the kept-or-drop A/B of one change). Files:
#            treeab_build.log, treeab.txt.
#     DMOE_AB_LAYER_ARGS [--iters 10]  more `dist-moe bench` flags for both sides, e.g. "--format
#                               fp8_blockwise --iters 5 --sustain-ms 100" (each block-scaled run also
#                               prints its BF16 layer's time: the speedup lines are kept);
#                               DMOE_AB_ARGS_<shape> adds flags for one shape (DMOE_AB_ARGS_dsv3_prefill=
#                               "--experts 128": one EP2 rank's expert GEMMs on one GPU)
#     DMOE_AB_BENCHES [layer]   layer: `dist-moe bench` per shape; gemm: bench_grouped_gemm, median ms of
#                               each side per shape, routing and op, B / A and B x cuBLAS (block-scaled
#                               ops: their pick, x our BF16 pick; DMOE_AB_GEMM_SWEEP_MATCH [none] times
#                               the configurations whose name has it too, as --sweep-match); quant:
#                               bench_quantize, each side's best ms per shape and quantizer, A / B and x copy
#                               (scripts/quantize_ab_table.py; e.g. DMOE_AB_BENCHES="quant layer")
#     DMOE_AB_SHAPES [dsv3_prefill qwen3_30b mixtral dsv3_decode]  DMOE_AB_ROUNDS [2]   (layer)
#     DMOE_AB_GEMM_SHAPES [qwen3_30b]  DMOE_AB_GEMM_OPS [w13_fprop,w13_fprop_noh1,w13_gather]
#     DMOE_AB_GEMM_ROUTING [balanced,random]  DMOE_AB_GEMM_ROUNDS [3]                   (gemm)
#     DMOE_AB_QUANT_SHAPES [dsv3_prefill,qwen3_30b]  DMOE_AB_QUANT_ROUNDS [2]           (quant)
#   ab       the layer under two environments of this build: A_ENV / B_ENV, space-separated VAR=value
#            assignments (empty: the defaults). File: ab.txt.
#       B_ENV="DMOE_GEMM_EXPERIMENTAL=1" DMOE_STAGES="build ab" scripts/gpu_check.sh
#     DMOE_AB_SHAPES [dsv3_prefill]  DMOE_AB_ROUNDS [3]
#   patchab  source variants given as patches, sharing $BUILD_DIR (only what a patch touches
#            recompiles): PATCH_TARGETS built and PATCH_CMD run on the tree as it is ("base"), then per
#            patch: apply, rebuild, run, revert. File: patchab.log; the summary keeps the lines of each
#            variant that match PATCH_GREP.
#       PATCHES="ab/prefetch.patch ab/warm.patch" PATCH_GREP="combine.first|graph: combine rank partials" \
#       PATCH_CMD="build-gpu/dmoe_launch -n 2 --timeout 300 -- build-gpu/bench/bench_dispatch_combine --shape dsv3_decode --no-sweep" \
#       DMOE_STAGES=patchab scripts/gpu_check.sh
#     PATCH_TARGETS [dmoe_launch bench_dispatch_combine]  PATCH_GREP [PASS|FAIL]  PATCH_BASE [1] (0: no base run)

# The layer A/B of one shape (scripts/layer_ab_rounds.sh): per round and side the forward and
# forward+backward times, then the medians and B / A; full outputs appended to the file named last.
layer_ab() {  # shape rounds a_build b_build a_env b_env full
  local shape=$1 mode=train
  local shape_args_var="DMOE_AB_ARGS_$shape"
  local shape_args=${!shape_args_var:-}
  [ "$shape" = dsv3_decode ] && mode=infer
  # shellcheck disable=SC2086  # DMOE_AB_LAYER_ARGS and the shape's flags: words
  x env A_ENV="$5" B_ENV="$6" scripts/layer_ab_rounds.sh "$shape" "$3" "$4" "$2" "$7" --shape "$shape" --mode "$mode" \
    ${DMOE_AB_LAYER_ARGS:---iters 10} $shape_args --no-baseline
}

# bench_grouped_gemm of two builds, interleaved; median ms per side, B / A, B x cuBLAS, x our BF16
# pick (scripts/gemm_ab_rounds.sh and its table).
gemm_tree_ab() {  # a_bin b_bin
  local rows="$WORK/treeab_gemm_rows.txt"
  : > "$rows"
  x scripts/gemm_ab_rounds.sh "$1" "$2" "${DMOE_AB_GEMM_ROUNDS:-3}" "$rows" --shapes "${DMOE_AB_GEMM_SHAPES:-qwen3_30b}" \
    --ops "${DMOE_AB_GEMM_OPS:-w13_fprop,w13_fprop_noh1,w13_gather}" --routing "${DMOE_AB_GEMM_ROUTING:-balanced,random}" \
    --sweep-match "${DMOE_AB_GEMM_SWEEP_MATCH:-none}"
}

# bench_quantize of two builds, interleaved; each side's best time per shape and quantizer (the
# per-case tables' rows, summary and layer forms), A / B (above 1: B faster) and x copy.
quant_tree_ab() {  # a_bin b_bin
  local dir="$WORK/treeab_quant" r side bin
  mkdir -p "$dir" && rm -f "$dir"/quantize_*.log
  for r in $(seq 1 "${DMOE_AB_QUANT_ROUNDS:-2}"); do
    for side in A B; do
      bin=$2; [ "$side" = A ] && bin=$1
      x timeout 300 "$bin" --shapes "${DMOE_AB_QUANT_SHAPES:-dsv3_prefill,qwen3_30b}" --iters 20 --sustain-ms 100 \
        > "$dir/quantize_$side$r.log" 2>&1
    done
    echo "quant round $r done"
  done
  echo "quant A/B (bench_quantize, best of ${DMOE_AB_QUANT_ROUNDS:-2} runs per side; A/B above 1: B faster):"
  python3 scripts/quantize_ab_table.py "$dir" AB
}

stage_treeab() {
  local a_tree=${A_TREE:-.abtree} benches=${DMOE_AB_BENCHES:-layer} start shape bench_opt=OFF
  local -a a_targets=(dist-moe dmoe_launch) b_targets=(dist-moe dmoe_launch)
  if [[ " $benches " == *" gemm "* ]]; then bench_opt=ON; a_targets+=(bench_grouped_gemm); b_targets+=(bench_grouped_gemm); fi
  if [[ " $benches " == *" quant "* ]]; then bench_opt=ON; a_targets+=(bench_quantize); b_targets+=(bench_quantize); fi
  start=$(date +%s)
  if [ -n "${A_PATCH:-}" ] && [ "$DRY_RUN" != 1 ]; then  # A = this checkout with the patch reversed
    if ! A_TREE=$a_tree scripts/ab_trees.sh --tree-only "$A_PATCH" > "$OUT/treeab_patch.log" 2>&1; then
      say "treeab: no A tree from A_PATCH $A_PATCH"; tee -a "$SUMMARY" < "$OUT/treeab_patch.log"
      return 1
    fi
    say "treeab: A = this checkout without $A_PATCH"
  fi
  if [ ! -f "$a_tree/CMakeLists.txt" ] && [ "$DRY_RUN" != 1 ]; then
    say "treeab: no source tree in $a_tree"; return 1
  fi
  if x cmake -S "$a_tree" -B "$a_tree/build-ab" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDIST_MOE_BUILD_PYTHON=OFF \
       -DDIST_MOE_BUILD_BENCH=$bench_opt -DDIST_MOE_NCCL_ROOT="$NCCL_ROOT" > "$OUT/treeab_build.log" 2>&1 &&
     x cmake --build "$a_tree/build-ab" -j "$(nproc)" --target "${a_targets[@]}" >> "$OUT/treeab_build.log" 2>&1; then
    say "treeab: A tree ($a_tree) built in $(( $(date +%s) - start )) s"
  else
    say "treeab: A build FAILED"; tail -20 "$OUT/treeab_build.log" | tee -a "$SUMMARY"; return 1
  fi
  build_targets treeab "${b_targets[@]}" || return 1
  : > "$OUT/treeab.txt"
  if [[ " $benches " == *" layer "* ]]; then
    for shape in ${DMOE_AB_SHAPES:-dsv3_prefill qwen3_30b mixtral dsv3_decode}; do
      layer_ab "$shape" "${DMOE_AB_ROUNDS:-2}" "$a_tree/build-ab" "$BUILD" "" "" "$WORK/treeab_layer.log" >> "$OUT/treeab.txt" 2>&1
      { grep -A2 "^layer A/B $shape" "$OUT/treeab.txt" || true; } | tee -a "$SUMMARY" > /dev/null
    done
  fi
  if [[ " $benches " == *" gemm "* ]]; then
    gemm_tree_ab "$a_tree/build-ab/bench/bench_grouped_gemm" "$BUILD/bench/bench_grouped_gemm" >> "$OUT/treeab.txt" 2>&1
    sed -n '/^gemm A\/B/,$p' "$OUT/treeab.txt" | tee -a "$SUMMARY" > /dev/null
  fi
  if [[ " $benches " == *" quant "* ]]; then
    quant_tree_ab "$a_tree/build-ab/bench/bench_quantize" "$BUILD/bench/bench_quantize" >> "$OUT/treeab.txt" 2>&1
    sed -n '/^quant A\/B/,$p' "$OUT/treeab.txt" | grep -E "quant A/B|^shape|fused|rows_cols" | tee -a "$SUMMARY" > /dev/null
  fi
}

stage_ab() {
  local shape
  build_targets ab dist-moe || return 1
  : > "$OUT/ab.txt"
  for shape in ${DMOE_AB_SHAPES:-dsv3_prefill}; do
    layer_ab "$shape" "${DMOE_AB_ROUNDS:-3}" "$BUILD" "$BUILD" "${A_ENV:-}" "${B_ENV:-}" "$WORK/ab_layer.log" >> "$OUT/ab.txt" 2>&1
    { grep -A2 "^layer A/B $shape" "$OUT/ab.txt" || true; } | tee -a "$SUMMARY" > /dev/null  # none in a dry run
  done
}

stage_patchab() {
  local log="$OUT/patchab.log" p name fail=0
  local -a ran=()
  # shellcheck disable=SC2086  # PATCH_TARGETS: target words
  patch_variant() {  # name: build, run PATCH_CMD, log under a header
    echo "##### variant $1" >> "$log"
    if ! build_targets "patchab_$1" ${PATCH_TARGETS:-dmoe_launch bench_dispatch_combine}; then
      tail -30 "$WORK/build_patchab_$1.log" >> "$log"; return 1
    fi
    x bash -c "$PATCH_CMD" >> "$log" 2>&1
    local rc=$?
    echo "##### variant $1: exit $rc" >> "$log"
    say "patchab $1: exit $rc"
  }
  [ -n "${PATCH_CMD:-}" ] || { say "patchab: set PATCH_CMD (the command each variant runs) and PATCHES"; return 2; }
  : > "$log"
  if [ "${PATCH_BASE:-1}" = 1 ]; then patch_variant base && ran+=(base); fi
  for p in ${PATCHES:-}; do
    name=$(basename "$p" .patch)
    if ! x git apply "$p"; then say "patchab $name: patch does not apply"; fail=1; continue; fi
    patch_variant "$name" && ran+=("$name")
    x git apply -R "$p" || { say "patchab $name: could not revert; stopping"; return 1; }
  done
  for name in "${ran[@]}"; do
    say "--- patchab $name"
    sed -n "/^##### variant $name\$/,/^##### variant $name: exit/p" "$log" | grep -E "${PATCH_GREP:-PASS|FAIL}" |
      sed 's/^\[rank 0\] //' | grep -v '^\[rank [1-9]' | head -20 | tee -a "$SUMMARY"
  done
  return $fail
}
