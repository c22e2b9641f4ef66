#!/usr/bin/env bash
# Models other than the EfficientNets on one GPU, in one device call of at most 10 minutes:
# ConvNeXtTiny (keras.applications, no weights), the ViT-B16 and the GPT2-small language
# model built into gpubench, and a small .keras file this script makes, each through the
# real `gpubench-agent` (NVML telemetry and energy, spooled records):
#   - `run` (the default rule, --batch steps) on the whole card: the largest batch that
#     fits (searched and recorded), epoch 2 timed at the largest power of two that fits
#     with 8 steps an epoch, images or tokens a second, energy;
#   - `largest-batch --memory-limit 8GiB,16GiB,48GiB`: the largest batch a card of each
#     size trains (the batch search only);
#   - `run --memory-limit 16GiB`: the same as a 16 GiB card would train it;
# and torchvision's own ConvNeXt-T and ViT-B/16 (batch 128, float32, 20 timed steps after
# 3) for the step rate Keras's code path is held to. Each step's failure leaves the
# others to run; steps past TIME_BUDGET seconds are skipped and said so; a table of
# every figure is printed last (and kept in $OUT/models.txt with every record and log in
# $OUT/models-evidence.tar.gz).
#
# The image models train on the protocol's 2,136 photos (1,709 an epoch: timed at batch
# 128 where it fits); the language model on a stated 256 sequences of 1,024 tokens (204
# an epoch, timed at batch 16), so that its epochs are short: its runs compare only with
# runs of as many samples.
#
# The device call (torch with CUDA and torchvision there; keras, namex, optree and
# protobuf wheels carried in .whl/, the wire code in gpubench/v1):
#   carry [".whl", "gpubench/v1"], command  OUT=$OUT bench/h200_models.sh
# On the CPU, a dry run of one tiny step of each kind (no wheels, no GPU):
#   OUT=/tmp/out PYTHON=.venv/bin/python bench/h200_models.sh --cpu-smoke
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
PYTHON=${PYTHON:-python3}
SMOKE=0
[ "${1:-}" = "--cpu-smoke" ] && SMOKE=1
TIME_BUDGET=${TIME_BUDGET:-540}  # seconds; the device call's limit is 600
# SKIP: names of steps to leave out ("ViT-B16-limits native-vit_b_16"), each said so.
WORK=${WORK:-/tmp/gpubench-models}
rm -rf "$WORK"; mkdir -p "$WORK/spool" "$WORK/logs" "$WORK/search" "$OUT"
export PYTHONUNBUFFERED=1 KERAS_BACKEND=torch GPUBENCH_CACHE=${GPUBENCH_CACHE:-/tmp/gpubench-cache}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT=$PWD
BEGAN=$(date +%s)

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  mkdir -p /tmp/site
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || echo "wheels: install failed"
fi
ls "$ROOT"/gpubench/v1/run_pb2.py >/dev/null || { echo "carry gpubench/v1 (make proto)"; exit 1; }
export PYTHONPATH=$ROOT:$ROOT/agent:$ROOT/collector:/tmp/site

left() { echo $(( TIME_BUDGET - ($(date +%s) - BEGAN) )); }
step() {  # step NAME SECONDS_NEEDED COMMAND...: run it unless time is short; never stops
  local name=$1 need=$2; shift 2
  case " ${SKIP:-} " in  # SKIP="NAME ...": steps measured already, in an earlier call
    *" $name "*) echo "== $name: skipped (SKIP)" | tee -a "$WORK/commands.txt"; return 0 ;;
  esac
  if [ "$(left)" -lt "$need" ]; then
    echo "== $name: skipped ($(left) s left, about $need s needed)" | tee -a "$WORK/commands.txt"
    return 0
  fi
  local start=$(date +%s)
  echo "== $name: $*" | tee -a "$WORK/commands.txt"
  "$@"
  echo "   exit $? after $(( $(date +%s) - start )) s" | tee -a "$WORK/commands.txt"
}
agent_run() {  # agent_run NAME ARGS...: one `gpubench-agent run`, offline, its records as JSON
  local name=$1; shift
  "$PYTHON" -m gpubench.agent.cli run --offline --backend torch --spool "$WORK/spool" \
    --idle-timeout 5 --label "models $name" --json "$@" \
    >"$WORK/logs/$name.json" 2>"$WORK/logs/$name.log"
  local code=$?
  tail -n 2 "$WORK/logs/$name.log"
  return $code
}
agent_search() {  # agent_search NAME ARGS...: `gpubench-agent largest-batch --json`
  local name=$1; shift
  "$PYTHON" -m gpubench.agent.cli largest-batch --backend torch --json "$@" \
    >"$WORK/search/$name.json" 2>"$WORK/logs/$name.search.log"
  local code=$?
  tail -n 2 "$WORK/logs/$name.search.log"
  return $code
}


# torchvision's own networks: the step rate of torch without Keras (float32, synthetic
# data on the GPU, Adam, 3 steps then 20 timed).
cat >"$WORK/native.py" <<'EOF'
import json, sys, time

import torch
import torchvision

name, batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
device = "cuda" if torch.cuda.is_available() else "cpu"
size = 224 if device == "cuda" else 32
build = {"convnext_tiny": torchvision.models.convnext_tiny,
         "vit_b_16": torchvision.models.vit_b_16}[name]
model = (build(weights=None, image_size=size) if name == "vit_b_16" and size != 224
         else build(weights=None)).to(device)
optimizer = torch.optim.Adam(model.parameters(), 1e-3)
x = torch.randn(batch, 3, size, size, device=device)
y = torch.randint(0, 1000, (batch,), device=device)

def step():
    optimizer.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()

for _ in range(3):
    step()
if device == "cuda":
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
began = time.perf_counter()
for _ in range(steps):
    step()
if device == "cuda":
    torch.cuda.synchronize()
seconds = time.perf_counter() - began
peak = torch.cuda.max_memory_allocated() if device == "cuda" else 0
print(json.dumps({"model": name, "batch": batch, "images_per_second": batch * steps / seconds,
                  "peak_gib": peak / 2**30}))
EOF

if [ "$SMOKE" = 1 ]; then
  # One tiny step of each kind on the CPU: the script's plumbing, not a measurement.
  step small-keras 0 "$PYTHON" "$ROOT/bench/small_cnn.py" "$WORK/small.keras" 32
  step small-run 0 agent_run small --models "$WORK/small.keras" --gpus 0 --limit-images 40 \
    --batch 8
  step small-search 0 agent_search small --models "$WORK/small.keras" --gpus 0 \
    --limit-images 40 --search-budget 60
  if "$PYTHON" -c "import torchvision" 2>/dev/null; then
    step native-convnext 0 sh -c "'$PYTHON' '$WORK/native.py' convnext_tiny 2 1 > '$WORK/native-convnext_tiny.json'"
  else
    echo "== native: skipped (no torchvision here)"
  fi
else
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$WORK/gpu.txt"
  step small-keras 60 "$PYTHON" "$ROOT/bench/small_cnn.py" "$WORK/small.keras" 128
  # The synthetic photos, generated once into the cache (the first run would otherwise).
  step data 60 "$PYTHON" -m gpubench.agent.workload make-data
  IMAGES="--search-budget 30"
  TOKENS="--limit-images 256 --search-budget 30"
  # The whole card: the largest batch, epoch 2 timed.
  step convnext-card 70 agent_run convnext-card --models ConvNeXtTiny $IMAGES
  step vit-card 70 agent_run vit-card --models ViT-B16 $IMAGES
  step lm-card 70 agent_run lm-card --models GPT2-small $TOKENS
  step small-card 45 agent_run small-card --models "$WORK/small.keras" $IMAGES
  # torch's own networks, no Keras: the rate Keras's code path is held to.
  for name in convnext_tiny vit_b_16; do
    step "native-$name" 25 sh -c "'$PYTHON' '$WORK/native.py' $name 128 20 > '$WORK/native-$name.json'"
  done
  # Cards of 8, 16 and 48 GiB: the largest batch each trains (the search alone).
  for model in ConvNeXtTiny ViT-B16 GPT2-small "$WORK/small.keras"; do
    name=$(basename "$model" .keras)
    args=$IMAGES; [ "$model" = GPT2-small ] && args=$TOKENS
    step "$name-limits" 50 agent_search "$name" --models "$model" \
      --memory-limit 8GiB,16GiB,48GiB $args
  done
  # Epoch 2 as a 16 GiB card trains it.
  step convnext-16 60 agent_run convnext-16 --models ConvNeXtTiny --memory-limit 16GiB $IMAGES
  step vit-16 60 agent_run vit-16 --models ViT-B16 --memory-limit 16GiB $IMAGES
  step lm-16 60 agent_run lm-16 --models GPT2-small --memory-limit 16GiB $TOKENS
  step small-16 45 agent_run small-16 --models "$WORK/small.keras" --memory-limit 16GiB $IMAGES
fi

# The table: every record and every search, one line each.
"$PYTHON" - "$WORK" >"$WORK/models.txt" <<'EOF'
import glob, json, os, sys

work = sys.argv[1]
GIB = 2**30
print(f"{'step':<16}{'model':<13}{'card':>8}{'largest':>8}{'timed':>6}{'epoch2 s':>9}"
      f"{'rate':>14}{'peak GiB':>9}{'J/epoch':>9}")
for path in sorted(glob.glob(f"{work}/logs/*.json")):
    step = os.path.basename(path)[:-5]
    try:
        runs = json.load(open(path))
    except ValueError:
        print(f"{step:<16}(no record: see logs/{step}.log)")
        continue
    for run in runs:
        config, result = run.get("config", {}), run.get("result", {})
        limit = int(config.get("memory_limit_bytes", 0) or 0)
        unit = "tok/s" if config.get("unit") == "tokens" else "img/s"
        peak = max((int(m.get("allocator_peak_bytes", 0) or 0)
                    for m in result.get("memory", [])), default=0)
        status = result.get("status", "")
        rate = float(result.get("train_images_per_second", 0) or 0)
        print(f"{step:<16}{config.get('model', '')[:12]:<13}"
              f"{(f'{limit // GIB} GiB' if limit else 'whole'):>8}"
              f"{result.get('largest_batch_per_gpu', 0):>8}{config.get('batch_per_gpu', 0):>6}"
              f"{float(result.get('epoch2_seconds', 0) or 0):>9.2f}"
              f"{rate:>8,.0f} {unit}{peak / GIB:>9.1f}"
              f"{float(result.get('energy_per_epoch_joules', 0) or 0):>9,.0f}"
              + ("" if status in ("", "RUN_STATUS_OK") else f"  {status}"))
for path in sorted(glob.glob(f"{work}/search/*.json")):
    try:
        rows = json.load(open(path))
    except ValueError:
        print(f"{os.path.basename(path)[:-5]:<16}(no search: see its log)")
        continue
    for row in rows:
        limit = row["memory_limit_bytes"]
        print(f"{'search':<16}{os.path.basename(row['model'])[:12]:<13}"
              f"{(f'{limit // GIB} GiB' if limit else 'whole'):>8}{row['largest']:>8}"
              + ("  (capped by the samples)" if row["capped"] else "")
              + (f"  (stopped by {row['stopped_by']})" if row["stopped_by"] else ""))
for path in sorted(glob.glob(f"{work}/native-*.json")):
    try:
        found = json.loads(open(path).read().strip().splitlines()[-1])
    except (ValueError, IndexError):
        print(f"{os.path.basename(path)[:-5]:<16}(failed)")
        continue
    print(f"{'torchvision':<16}{found['model'][:12]:<13}{'whole':>8}{'':>8}{found['batch']:>6}"
          f"{'':>9}{found['images_per_second']:>8,.0f} img/s{found['peak_gib']:>9.1f}")
EOF
cp "$WORK/models.txt" "$WORK/commands.txt" "$OUT/" 2>/dev/null
tar -czf "$OUT/models-evidence.tar.gz" -C "$WORK" --exclude='*.keras' . 2>/dev/null
echo "== $(( $(date +%s) - BEGAN )) s in all"
cat "$WORK/models.txt"
