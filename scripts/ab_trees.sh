#!/usr/bin/env bash
# A / B source trees for one-off device run scripts: A = this checkout with PATCH reversed, in
# .abtree (built into .abtree/build-ab), B = this checkout (build-gpu); both built at once through
# scripts/quick_build.sh, logs $OUT/build.log (B) and $OUT/A/build.log. Exits 1 when the patch does
# not reverse or either build fails. (gpu_check.sh's treeab stage builds its trees one after the
# other with the CLI always; this is the quicker form the s33-s51 run scripts each wrote out.)
#   scripts/ab_trees.sh PATCH "B targets" "A targets"
#   e.g. scripts/ab_trees.sh docs/gpu_runs/.../change.patch "bench_quantize dist_moe_gpu_tests" bench_quantize
#   scripts/ab_trees.sh --tree-only PATCH...   only the A source tree, each PATCH reversed in turn (the
#                                              treeab stage and the run prelude's reversed_tree build it)
# A_TREE [.abtree]: where the A tree goes.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
tree_only=0; [ "${1:-}" = --tree-only ] && { tree_only=1; shift; }
if [ $tree_only = 1 ]; then [ $# -ge 1 ]; else [ $# -eq 3 ]; fi ||
  { echo "usage: scripts/ab_trees.sh PATCH \"B targets\" \"A targets\" | --tree-only PATCH..."; exit 2; }
patches=("$1"); [ $tree_only = 1 ] && patches=("$@")
a_tree=${A_TREE:-.abtree}
rm -rf "$a_tree" && mkdir -p "$a_tree"
tar -cf - --exclude='./build*' --exclude='./.abtree*' --exclude="./$a_tree" . | tar -xf - -C "$a_tree"
for p in "${patches[@]}"; do
  patch_file=$(realpath -e "$p" 2>/dev/null) || { echo "ab_trees: no patch $p"; exit 1; }
  (cd "$a_tree" && patch -s -R -p1 < "$patch_file") || { echo "ab_trees: $p does not reverse on this checkout"; exit 1; }
done
[ $tree_only = 1 ] && exit 0
OUT=${OUT:-/tmp}
mkdir -p "$OUT/A"
# shellcheck disable=SC2086  # the target lists are words
(OUT=$OUT BUILD_DIR=build-gpu scripts/quick_build.sh $2) &
b=$!
# shellcheck disable=SC2086
(cd "$a_tree" && OUT=$OUT/A BUILD_DIR=build-ab scripts/quick_build.sh $3) &
a=$!
wait $b; rb=$?
wait $a; ra=$?
[ $rb = 0 ] && [ $ra = 0 ] || { echo "ab_trees: build failed (B rc=$rb, A rc=$ra)"; exit 1; }
