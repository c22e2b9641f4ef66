#!/usr/bin/env bash
# The containers on a GPU machine with no NVIDIA Container Toolkit, no registry and no
# package index: the docker engine started from a carried pack, a base image made of the
# machine's own root file system (its Python with CUDA PyTorch), the images built FROM it
# with carried wheels alone, a collector container, and docker/README.md's command for a
# host without the toolkit run as written, beside the same run in-process.
#
#   OUT=$OUT bench/h200_docker.sh STEP [STEP ...]
#
# Steps:
#   setup              the engine (bench/h200_engine_up.sh .gpu/engine.tar.xz), the base image, the
#                      agent, workload and collector images (docker/build.sh --base
#                      --wheels --no-index), the collector container and its token
#   quick-host         gpubench-agent run --quick --offline, in-process (this checkout)
#   quick-container    docker/README.md's gpu-agent-devices block with --quick
#   default-host       the default run in-process (B0, B3, B7, searched batches)
#   default-container  docker/README.md's gpu-agent-devices block as written
#   custom-model-container
#                      docker/README.md's gpu-agent-model block as written (with --batch
#                      64, given rather than searched): a small .keras file made on the
#                      host in /tmp/stranger/models (the block's ~/models, HOME set to
#                      /tmp/stranger), which the agent container sees at /models; checks
#                      exit 0 and the run's record on the spool volume
#   gpu-tests          tests/gpu/test_gpu_containers.py (README's command with --quick,
#                      docker stop mid-epoch, --gpu-access toolkit without a toolkit: exit 2)
#   sizes              the images' sizes
# Every step's console goes to $OUT/evidence.tar.gz with the records (the host's spool,
# the spool volume, the collector's runs as JSON) and $OUT/summary.txt.
#
# Needs, carried with the working tree: .gpu/engine.tar.xz (../shared/tools/gpu-docker/
# pack.sh), .gpu/wheels.tar.xz (bench/wheelhouse.py pack: keras, namex, optree,
# protobuf, grpcio, grpcio-health-checking, grpcio-reflection, grpcio-tools, setuptools,
# wheel, packaging, typing-extensions, docker, duckdb, and starlette and uvicorn for the
# collector image's site, for the machine's Python; more
# .gpu/wheels*.tar.xz are unpacked too) and gpubench/v1 (`make proto`).
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
ROOT=$PWD
WORK=/tmp/gpubench-docker
BASE=gpu-local-base:1
COLLECTOR=127.0.0.1:50051
mkdir -p "$WORK/logs" "$WORK/spool"
export PYTHONUNBUFFERED=1 GPUBENCH_CACHE=/tmp/gpubench-cache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$ROOT:$ROOT/agent:$ROOT/collector:/tmp/site

say() { echo "== $*" | tee -a "$WORK/commands.txt"; }
stamp() {  # each line of stdin with the seconds since $1
  python3 -c '
import sys, time
start = float(sys.argv[1])
for line in sys.stdin:
    sys.stdout.write(f"{time.time() - start:8.2f} {line}")
    sys.stdout.flush()' "$1"
}
timed() {  # timed NAME COMMAND...: stdout and stderr, stamped, to logs/NAME.log
  local name=$1; shift
  local start; start=$(date +%s.%N)
  say "$name: $*"
  "$@" 2>&1 | stamp "$start" >"$WORK/logs/$name.log"
  local code=${PIPESTATUS[0]}
  echo "   exit $code after $(python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$start") s" \
    | tee -a "$WORK/commands.txt"
  tail -n 3 "$WORK/logs/$name.log"
  return "$code"
}
readme_block() {  # the docker/README.md block NAME, as written
  python3 - "$1" <<'PY'
import sys
sys.path.insert(0, "tests/docker")
from readme_blocks import blocks
print(blocks()[sys.argv[1]])
PY
}
agent_host() { python3 -m gpubench.agent.cli "$@"; }

setup() {
  for packed in .gpu/wheels*.tar.xz; do
    python3 bench/wheelhouse.py unpack "$packed" "$WORK/wheels" || return 1
  done
  # The in-process agent: the machine's Python, with what it lacks from the same wheels.
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    "$WORK"/wheels/{keras,namex,optree,protobuf,grpcio,grpcio_health_checking,grpcio_reflection,docker}-*.whl \
    || return 1
  timed engine bash bench/h200_engine_up.sh .gpu/engine.tar.xz "$BASE" || return 1
  # The wheels where the builds find them (what `build.sh --wheels` does), then the three
  # builds at once: each is mostly waiting on pip and the layer export.
  ln -f "$WORK"/wheels/*.whl docker/wheels/ || return 1
  local pids=() name
  for name in agent workload collector; do
    GPUBENCH_BUILD_NETWORK=host timed "build-$name" docker/build.sh --base "$BASE" --no-index "$name" &
    pids+=($!)
  done
  local failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  ((failed == 0)) || return 1
  docker volume create gpubench-data >/dev/null
  docker volume create gpubench-spool >/dev/null
  docker rm -f gpubench-collector >/dev/null 2>&1
  docker run -d --name gpubench-collector --network host -v gpubench-data:/data \
    gpubench-collector >/dev/null || return 1
  docker exec gpubench-collector gpubench-healthcheck --wait 60 || return 1
  docker exec gpubench-collector gpubench-collector token create "h200-$(date +%s)" \
    >"$WORK/token" || return 1
}

container_run() {  # container_run NAME [FLAGS...]: the README's block, flags appended
  local name=$1; shift
  local script; script=$(readme_block gpu-agent-devices) || return 1
  # Only what the step adds: a label, and for the quick step --quick.
  script="$script --label 'h200 $name' $*"
  TOKEN=$(cat "$WORK/token") GPUBENCH_TOKEN=$(cat "$WORK/token") timed "$name" bash -euo pipefail -c "$script"
}

STRANGER=/tmp/stranger  # HOME for the gpu-agent-model block: its ~/models on this host
custom_model_run() {  # the gpu-agent-model block, the model's folder mounted elsewhere
  mkdir -p "$STRANGER/models"
  # A small CNN of the user's own (bench/small_cnn.py), saved by Keras on the machine's torch.
  KERAS_BACKEND=torch timed custom-model-keras python3 "$ROOT/bench/small_cnn.py" \
    "$STRANGER/models/my.keras" 128 || return 1
  local script; script=$(readme_block gpu-agent-model) || return 1
  script="$script --label 'h200 custom-model-container' --batch 64"
  HOME=$STRANGER GPUBENCH_TOKEN=$(cat "$WORK/token") \
    timed custom-model-container bash -euo pipefail -c "$script" || return 1
  # The record, as the agent container left it on the spool volume.
  docker run --rm -v gpubench-spool:/spool --entrypoint sh gpubench-agent -c \
    'cat /spool/pending/*.json /spool/sent/*.json 2>/dev/null; true' \
    | python3 -c '
import json, sys
decoder, text, found = json.JSONDecoder(), sys.stdin.read(), []
at = 0
while at < len(text):
    if text[at].isspace():
        at += 1
        continue
    run, at = decoder.raw_decode(text, at)
    if run.get("label") == "h200 custom-model-container":
        found.append(run)
for run in found:
    result = run.get("result", {})
    print("record:", run["config"].get("model"), result.get("status"),
          "epoch 2", result.get("epoch2_seconds"), "s,",
          result.get("train_images_per_second"), "img/s")
sys.exit(0 if found and all(r.get("result", {}).get("status") == "RUN_STATUS_OK"
                            for r in found) else 1)
' | tee -a "$WORK/commands.txt"
  local code=${PIPESTATUS[1]}
  echo "   record check: exit $code" | tee -a "$WORK/commands.txt"
  return "$code"
}

host_run() {  # host_run NAME [FLAGS...]: the same run in-process (this checkout)
  local name=$1; shift
  timed "$name" agent_host run --offline --spool "$WORK/spool" --label "h200 $name" \
    --json "$@"
}

evidence() {
  docker run --rm -v gpubench-spool:/spool --entrypoint tar gpubench-agent \
    -C /spool -cf - . >"$WORK/spool-volume.tar" 2>/dev/null
  python3 -m gpubench.cli --collector "$COLLECTOR" --token "$(cat "$WORK/token" 2>/dev/null)" \
    runs list --format json >"$WORK/collector-runs.json" 2>"$WORK/logs/collector-runs.err"
  python3 "$ROOT/bench/summarize_runs.py" "$WORK/spool" >"$OUT/summary.txt" 2>&1
  tar -C "$WORK" --exclude=wheels -czf "$OUT/evidence.tar.gz" .
}

for step in "$@"; do
  case $step in
    setup) setup || { echo "setup failed"; evidence; exit 1; } ;;
    quick-host) host_run quick-host --quick ;;
    quick-container) container_run quick-container --quick ;;
    default-host) host_run default-host ;;
    default-container) container_run default-container ;;
    custom-model-container) custom_model_run || echo "custom-model-container failed" ;;
    gpu-tests) timed gpu-tests python3 -m pytest -q -p no:cacheprovider --rootdir "$ROOT" \
                 -c "$ROOT/pyproject.toml" -m gpu "$ROOT/tests/gpu/test_gpu_containers.py" ;;
    sizes) {  # each image's size, and what it adds to the base it was built FROM
             base_size=$(docker image inspect --format '{{.Size}}' "$BASE")
             echo "$BASE $((base_size / 1000000)) MB"
             for image in gpubench-agent gpubench-workload gpubench-collector; do
               size=$(docker image inspect --format '{{.Size}}' "$image:latest")
               echo "$image:latest $((size / 1000000)) MB, $(((size - base_size) / 1000000)) MB over the base"
             done
           } | tee "$WORK/sizes.txt" ;;
    *) echo "unknown step $step" >&2 ;;
  esac
  # After every step, so that a call cut off by its time limit brings back what it has.
  evidence
done
cat "$OUT/summary.txt"
