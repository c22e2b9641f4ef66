#!/usr/bin/env bash
# The same steps of bench/h200_session.sh at two versions of the code, in one device call,
# one after the other on the same GPU: BEFORE_DIR (a tree of the older commit, `git archive
# REV gpubench agent bench | tar -x -C BEFORE_DIR`, with the wire code `make proto` made
# copied into its gpubench/v1) and this checkout. Each side's records, console and
# evidence go to $OUT/before and $OUT/after; $OUT/before-after.txt has each model's
# figures and their ratios (bench/before_after.py).
#
#   OUT=$OUT bash bench/h200_before_after.sh BEFORE_DIR [STEP ...]    (default: default)
#
# A first `quick` step of this checkout warms the machine (the synthetic data set made
# and cached, CUDA's first context) so that neither side pays for it.
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
before=$(realpath "${1:?usage: h200_before_after.sh BEFORE_DIR [STEP ...]}"); shift
steps=("$@"); ((${#steps[@]})) || steps=(default)
ROOT=$PWD
ln -sfn "$ROOT/.whl" "$before/.whl"  # the carried wheels, for both sides
side() {  # side NAME DIR STEP...
  local name=$1 dir=$2; shift 2
  rm -rf /tmp/gpubench-evidence
  mkdir -p "$OUT/$name"
  (cd "$dir" && OUT="$OUT/$name" bash bench/h200_session.sh "$@")
  cp -r /tmp/gpubench-evidence/spool "$OUT/$name/spool"
}
side warm-up "$ROOT" quick
side before "$before" "${steps[@]}"
side after "$ROOT" "${steps[@]}"
python3 "$ROOT/bench/before_after.py" "$OUT/before/spool" "$OUT/after/spool" \
  | tee "$OUT/before-after.txt"
