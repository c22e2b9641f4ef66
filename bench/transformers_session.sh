#!/usr/bin/env bash
# The transformers at the card's speed, in one device call: plain PyTorch's training steps
# (bench/transformer_reference.py) beside gpubench's own runs of the same models at the
# same batches, precisions and math modes, each ratio printed; the kernels a gpubench step
# runs (bench/transformer_kernels.py); and the default run (B0, B3, B7) of this checkout
# and, with BEFORE set, of an older tree (its records labelled with the card's name).
#
#   OUT=$OUT [BEFORE=.gpu/before] [CASES="..."] bash bench/transformers_session.sh STEP...
#
# Steps: default-before (BEFORE's default run), reference
# (plain PyTorch, eager and, for the cases marked so, compiled), gpubench (the agent's
# runs), ratios, kernels, default (this checkout's default run).
# CASES are MODEL:PRECISION:BATCH:MATH_MODE, each run by both (the default below).
# Needs, carried with the working tree: .whl/ (bench/h200_session.sh says which wheels),
# gpubench/v1 (`make proto`) and, for default-before, BEFORE with its own gpubench/v1
# (`git archive REV gpubench agent collector bench protos setup.py`, then
# `python -c "import setup; setup.generate_wire_code()"` there).
# Everything goes to $OUT/transformers.txt and $OUT/transformers.tar.gz.
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
ROOT=$PWD
WORK=/tmp/gpubench-transformers
mkdir -p "$WORK/spool" "$WORK/logs" /tmp/site
CASES=${CASES:-"GPT2-small:mixed_bfloat16:32:tf32 ViT-B16:mixed_bfloat16:128:tf32
ViT-B16:float32:128:tf32 GPT2-small:float32:16:tf32"}
COMPILED=${COMPILED:-""}  # reference cases also run under torch.compile
export PYTHONUNBUFFERED=1 KERAS_BACKEND=torch GPUBENCH_CACHE=/tmp/gpubench-cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$ROOT:$ROOT/agent:$ROOT/collector:/tmp/site
log() { echo "$@" | tee -a "$OUT/transformers.txt"; }
pack() { tar -C "$WORK" -czf "$OUT/transformers.tar.gz" .; }

CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 \
  | grep -o -i -E 'h100|h200|a100|l40s|b200' | head -n 1 | tr 'A-Z' 'a-z')
default_run() {  # default_run NAME DIR: `gpubench-agent run --offline` of the tree in DIR
  local name=$1 dir=$2 start=$SECONDS
  mkdir -p "$WORK/$name/spool"
  log "== default run, $name ($dir): gpubench-agent run --offline --label '${CARD:-gpu} default'"
  # As a person types it (bench/h200_session.sh's `default`): no KERAS_BACKEND.
  (cd "$WORK/$name" && env -u KERAS_BACKEND PYTHONPATH="$dir:$dir/agent:$dir/collector:/tmp/site" \
    python3 -m gpubench.agent.cli run --offline --spool "$WORK/$name/spool" \
    --label "${CARD:-gpu} default" --trace "$WORK/logs/default-$name.trace.jsonl" --json \
    >"$WORK/logs/default-$name.json" 2>"$WORK/logs/default-$name.log")
  log "   exit $? after $((SECONDS - start)) s"
  python3 bench/summarize_runs.py "$WORK/$name/spool" | tee -a "$OUT/transformers.txt"
}

for step in "$@"; do
  start=$SECONDS
  case $step in
    default-before) default_run before "$(realpath "${BEFORE:?set BEFORE to the older tree}")" ;;
    default) default_run after "$ROOT" ;;
    reference)
      cases=()
      for c in $CASES; do cases+=(--case "$c"); done
      for c in $COMPILED; do cases+=(--case "$c:compiled"); done
      log "== reference: python3 bench/transformer_reference.py run ${cases[*]}"
      python3 bench/transformer_reference.py run --out "$WORK/reference.jsonl" "${cases[@]}" \
        2>"$WORK/logs/reference.log" | tee -a "$OUT/transformers.txt"
      log "   exit ${PIPESTATUS[0]} after $((SECONDS - start)) s" ;;
    gpubench)
      for c in $CASES; do
        IFS=: read -r model precision batch math <<<"$c"
        name="$model-$precision-$batch-$math"
        args=(--models "$model" --batch "$batch" --precision "$precision" --math-mode "$math")
        log "== $name: gpubench-agent run --offline --backend torch ${args[*]}"
        began=$SECONDS
        python3 -m gpubench.agent.cli run --offline --backend torch --spool "$WORK/spool" \
          --idle-timeout 20 --label "$name" --trace "$WORK/logs/$name.trace.jsonl" --json \
          "${args[@]}" >"$WORK/logs/$name.json" 2>"$WORK/logs/$name.log"
        log "   exit $? after $((SECONDS - began)) s"
        tail -n 3 "$WORK/logs/$name.log"
        pack  # each record as soon as it is made: the call's limit may cut the next run
      done ;;
    ratios)
      log "== ratios: python3 bench/transformer_reference.py ratios reference.jsonl spool"
      python3 bench/transformer_reference.py ratios "$WORK/reference.jsonl" "$WORK/spool" \
        | tee -a "$OUT/transformers.txt" ;;
    kernels)
      log "== kernels: python3 bench/transformer_kernels.py --model GPT2-small --precision mixed_bfloat16 --batch 16"
      python3 bench/transformer_kernels.py --model GPT2-small --precision mixed_bfloat16 \
        --batch 16 2>"$WORK/logs/kernels.log" | tee -a "$OUT/transformers.txt"
      tail -n 3 "$WORK/logs/kernels.log" ;;
    *) echo "unknown step $step" >&2 ;;
  esac
  pack  # after every step: a call cut off by its limit still brings back what it made
done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >>"$OUT/transformers.txt"
tail -n 40 "$OUT/transformers.txt"
