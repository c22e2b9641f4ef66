#!/usr/bin/env bash
# GPU evidence on a machine with NVIDIA GPUs but without TensorFlow, Keras or DuckDB:
# installs Keras (torch backend) and gpubench from carried wheels, then runs the
# named steps through the real `gpubench-agent` (NVML telemetry, spool records) and
# packs everything into $OUT/evidence.tar.gz (spooled run records, events logs,
# raw telemetry traces, inventory) with a summary in $OUT/summary.txt.
#
#   bench/h200_session.sh STEP [STEP ...]
#
# Steps: inventory, b0-128, protocol-b0, protocol-b3, protocol-b7, auto-b0,
#        fast-b0, fast-b0-jit, fast-b7, bf16-b0-128, gpus2-b0, gpus2-b3
# Needs, carried with the working tree: .whl/ (keras, namex, optree and protobuf
# wheels for the machine's Python) and gpubench/v1 (the wire code `make proto` made).
# The device call: carry [".whl", "gpubench/v1"], command
#   OUT=$OUT bench/h200_session.sh inventory b0-128 fast-b0 ...
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
WORK=/tmp/gpubench-evidence
mkdir -p "$WORK/spool" "$WORK/logs" /tmp/site
export PYTHONUNBUFFERED=1 KERAS_BACKEND=torch GPUBENCH_CACHE=/tmp/gpubench-cache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# Wheels for what the machine lacks; gpubench itself through a folder of links that
# lays the repository out as the installed package (setup.py's LAYOUT), run from
# outside the repository so Python cannot find the bare gpubench/ folder first.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
ROOT=$PWD
SHIM=/tmp/gpubench-shim
mkdir -p "$SHIM/gpubench"
for entry in "$ROOT"/gpubench/*; do ln -sfn "$entry" "$SHIM/gpubench/"; done
ln -sfn "$ROOT/agent" "$SHIM/gpubench/agent"
ln -sfn "$ROOT/collector" "$SHIM/gpubench/collector"
ls "$ROOT"/gpubench/v1/run_pb2.py >/dev/null || { echo "carry gpubench/v1 (make proto)"; exit 1; }
export PYTHONPATH=$SHIM:/tmp/site
cd "$WORK"
gpubench-agent() { python3 -m gpubench.agent.cli "$@"; }

agent() {  # agent NAME ARGS...: one gpubench-agent run, offline, traced
  local name=$1; shift
  local start=$(date +%s)
  echo "== $name: gpubench-agent run --offline --backend torch $*" | tee -a "$WORK/commands.txt"
  gpubench-agent run --offline --backend torch --spool "$WORK/spool" --idle-timeout 20 \
    --label "h200 $name" --trace "$WORK/logs/$name.trace.jsonl" --json "$@" \
    >"$WORK/logs/$name.json" 2>"$WORK/logs/$name.log"
  echo "   exit $? after $(( $(date +%s) - start )) s" | tee -a "$WORK/commands.txt"
  tail -n 3 "$WORK/logs/$name.log"
}

for step in "$@"; do
  case $step in
    inventory)   gpubench-agent inventory --json >"$WORK/inventory.json"; nvidia-smi >"$WORK/nvidia-smi.txt" ;;
    b0-128)      agent b0-128 --models B0 --batch 128 ;;
    protocol-b0) agent protocol-b0 --models B0 --batch 512 ;;
    protocol-b3) agent protocol-b3 --models B3 --batch 128 ;;
    protocol-b7) agent protocol-b7 --models B7 --batch 10 ;;
    auto-b0)     agent auto-b0 --models B0 --batch auto ;;
    bf16-b0-128) agent bf16-b0-128 --models B0 --batch 128 --precision mixed_bfloat16 ;;
    fast-b0)     agent fast-b0 --models B0 --batch 512 --precision mixed_bfloat16 --data-on-device --batched-augmentation ;;
    fast-b0-jit) agent fast-b0-jit --models B0 --batch 512 --precision mixed_bfloat16 --data-on-device --batched-augmentation --jit-compile ;;
    fast-b7)     agent fast-b7 --models B7 --batch 16 --precision mixed_bfloat16 --data-on-device --batched-augmentation ;;
    gpus2-b0)    agent gpus2-b0 --models B0 --batch 128 --gpus 2 ;;
    gpus2-b3)    agent gpus2-b3 --models B3 --batch 64 --gpus 2 ;;
    *) echo "unknown step $step" >&2 ;;
  esac
done

python3 "$ROOT/bench/summarize_runs.py" "$WORK/spool" | tee "$OUT/summary.txt"
tar -C "$WORK" -czf "$OUT/evidence.tar.gz" .
