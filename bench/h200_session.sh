#!/usr/bin/env bash
# GPU evidence on a machine with NVIDIA GPUs but without TensorFlow, Keras or DuckDB:
# installs Keras (torch backend) and gpubench from carried wheels, then runs the
# named steps through the real `gpubench-agent` (NVML telemetry, spool records) and
# packs everything into $OUT/evidence.tar.gz (spooled run records, events logs,
# raw telemetry traces, inventory) with a summary in $OUT/summary.txt.
#
#   bench/h200_session.sh STEP [STEP ...]
#
# Steps (the case list below says what each runs): the default run as a person types
# it: default (B0, B3 and B7), quick (--quick), repeat-b0 (the default B0 three times),
# jax-quick, jax-repeat (--quick --backend jax, once and twice more), jax-eager (the same
# uncompiled: refused), keras-quick (--quick on Keras's own torch code path),
# largest-limits (largest-batch under 8, 16 and 48 GiB); inventory; b0-128 (Keras's own
# code path); the protocol's batches with the workload's defaults (torch's kernels)
# protocol-b0, protocol-b3, protocol-b7, auto-b0, bf16-b0-128; the same kernels named
# explicitly kernels-b0-128, kernels-b3-128, kernels-b7-10; the fast settings fast-b0,
# fast-b0-jit, fast-b3, fast-b7, auto-fast-b0; two GPUs gpus2-b0, gpus2-b3,
# gpus2-fast-b0, gpus2-fast-b3, gpus2-fast-b7; the fast settings with every step
# replayed as a CUDA graph graphs-b0, graphs-b3, graphs-b7, graphs-b0-128 and graphs-b7-10 (float32),
# graphs-auto-b0; gpu-tests (tests/gpu/test_cuda_graphs.py);
# profile-b0, profile-b7, profile-fast, profile-graphs; shape-setup (bench/trial_costs.py:
# a new batch shape's first step under cuDNN's settings);
# (bench/keras_torch_profile.py: where a step's time goes); and
# collector (bench/collector_bench.py with the collector pinned to two cores).
# Needs, carried with the working tree: .whl/ (keras, namex, optree and protobuf
# wheels for the machine's Python) and gpubench/v1 (the wire code `make proto` made).
# The device call: carry [".whl", "gpubench/v1"], command
#   OUT=$OUT bench/h200_session.sh inventory b0-128 fast-b0 ...
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
WORK=/tmp/gpubench-evidence
mkdir -p "$WORK/spool" "$WORK/logs" /tmp/site
export PYTHONUNBUFFERED=1 KERAS_BACKEND=torch GPUBENCH_CACHE=/tmp/gpubench-cache
# JAX takes the memory it uses, not 75% of the card up front: honest peak figures.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# Wheels for what the machine lacks; gpubench itself straight from the checkout (its
# three source roots: the shared gpubench/, agent/ and collector/).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
ROOT=$PWD
ls "$ROOT"/gpubench/v1/run_pb2.py >/dev/null || { echo "carry gpubench/v1 (make proto)"; exit 1; }
export PYTHONPATH=$ROOT:$ROOT/agent:$ROOT/collector:/tmp/site
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

# The same network computed in fewer kernels (torch): see docs/protocol.md.
KERNELS="--batched-augmentation --fused-batchnorm --channels-first"
KERAS="--keras-augmentation --keras-batchnorm --channels-last"  # Keras's own code path
FAST="--precision mixed_bfloat16 --data-on-device $KERNELS"
GRAPHS="$FAST --cuda-graphs"  # and every step replayed as a CUDA graph
bare() {  # bare NAME ARGS...: `gpubench-agent run --offline ARGS`, nothing else set
  local name=$1; shift
  local start=$(date +%s.%N)
  echo "== $name: gpubench-agent run --offline $*" | tee -a "$WORK/commands.txt"
  # As a person types it: no KERAS_BACKEND, the agent picks the backend that runs.
  env -u KERAS_BACKEND python3 -m gpubench.agent.cli run --offline --spool "$WORK/spool" \
    --label "h200 $name" --trace "$WORK/logs/$name.trace.jsonl" --json "$@" \
    >"$WORK/logs/$name.json" 2>"$WORK/logs/$name.log"
  local code=$?
  echo "   exit $code after $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)") s" | tee -a "$WORK/commands.txt"
  tail -n 4 "$WORK/logs/$name.log"
  return $code
}
largest() {  # largest NAME ARGS...: `gpubench-agent largest-batch ARGS --json`
  local name=$1; shift
  local start=$(date +%s)
  echo "== $name: gpubench-agent largest-batch $*" | tee -a "$WORK/commands.txt"
  env -u KERAS_BACKEND python3 -m gpubench.agent.cli largest-batch --json "$@" \
    >"$WORK/$name.json" 2>"$WORK/logs/$name.log"
  echo "   exit $? after $(( $(date +%s) - start )) s" | tee -a "$WORK/commands.txt"
  tail -n 3 "$WORK/logs/$name.log"
}
profile() {  # profile NAME VARIANT...: bench/keras_torch_profile.py
  local name=$1; shift
  local args=()
  for variant in "$@"; do args+=(--variant "$variant"); done
  python3 "$ROOT/bench/keras_torch_profile.py" --out "$WORK/profile" "${args[@]}" \
    | tee "$WORK/$name.txt"
}

for step in "$@"; do
  case $step in
    inventory)   gpubench-agent inventory --json >"$WORK/inventory.json"; nvidia-smi >"$WORK/nvidia-smi.txt" ;;
    b0-128)      agent b0-128 --models B0 --batch 128 $KERAS ;;
    kernels-b0-128) agent kernels-b0-128 --models B0 --batch 128 $KERNELS ;;
    protocol-b0) agent protocol-b0 --models B0 --batch 512 ;;
    protocol-b3) agent protocol-b3 --models B3 --batch 128 ;;
    protocol-b7) agent protocol-b7 --models B7 --batch 10 ;;
    kernels-b3-128) agent kernels-b3-128 --models B3 --batch 128 $KERNELS ;;
    kernels-b7-10) agent kernels-b7-10 --models B7 --batch 10 $KERNELS ;;
    auto-b0)     agent auto-b0 --models B0 --batch steps ;;
    auto-fast-b0) agent auto-fast-b0 --models B0 --batch steps $FAST ;;
    bf16-b0-128) agent bf16-b0-128 --models B0 --batch 128 --precision mixed_bfloat16 ;;
    fast-b0)     agent fast-b0 --models B0 --batch 512 $FAST ;;
    fast-b0-jit) agent fast-b0-jit --models B0 --batch 512 $FAST --jit-compile ;;
    fast-b3)     agent fast-b3 --models B3 --batch 256 $FAST ;;
    fast-b7)     agent fast-b7 --models B7 --batch 48 $FAST ;;
    graphs-b0)   agent graphs-b0 --models B0 --batch 512 $GRAPHS ;;
    graphs-b3)   agent graphs-b3 --models B3 --batch 256 $GRAPHS ;;
    graphs-b7)   agent graphs-b7 --models B7 --batch 48 $GRAPHS ;;
    graphs-b0-128) agent graphs-b0-128 --models B0 --batch 128 $KERNELS --cuda-graphs ;;
    graphs-b7-10) agent graphs-b7-10 --models B7 --batch 10 $KERNELS --cuda-graphs ;;
    graphs-auto-b0) agent graphs-auto-b0 --models B0 --batch steps $GRAPHS ;;
    gpu-tests)   python3 -m pytest -q -p no:cacheprovider --rootdir "$ROOT" -c "$ROOT/pyproject.toml" \
                   "$ROOT/tests/gpu/test_cuda_graphs.py" >"$WORK/gpu-tests.txt" 2>&1
                 tail -n 5 "$WORK/gpu-tests.txt" ;;
    # A process of its own: the test selects the backend before Keras is imported.
    warm-tests)  python3 -m pytest -q -p no:cacheprovider --rootdir "$ROOT" -c "$ROOT/pyproject.toml" \
                   "$ROOT/tests/gpu/test_warm_trials.py" >"$WORK/warm-tests.txt" 2>&1
                 tail -n 5 "$WORK/warm-tests.txt" ;;
    # The whole default suite: B0, B3, B7, --batch steps. Should the backend check
    # refuse the machine (exit 2), the same run with the backend named.
    default)     bare default; [ $? -eq 2 ] && bare default-torch --backend torch ;;
    quick)       bare quick --quick ;;
    # Keras on JAX, compiled (its default), beside torch's --quick; uncompiled is refused
    # on a GPU (exit 2); Keras's own torch code path, whose GPU mostly waits.
    jax-quick)   bare jax-quick --quick --backend jax ;;
    jax-repeat)  for i in 2 3; do bare "jax-quick-$i" --quick --backend jax; done ;;
    jax-eager)   bare jax-eager --quick --backend jax --no-jit-compile
                 echo "   (exit 2 expected: refused)" ;;
    keras-quick) bare keras-quick --quick --backend torch $KERAS --no-cuda-graphs ;;
    # The default run at the fast settings, one model a step (evidence after each).
    fast-default-b0) bare fast-default --models B0 --precision mixed_bfloat16 --data-on-device ;;
    fast-default-b3) bare fast-default --models B3 --precision mixed_bfloat16 --data-on-device ;;
    fast-default-b7) bare fast-default --models B7 --precision mixed_bfloat16 --data-on-device ;;
    repeat-b0)   for i in 1 2 3; do bare "default-b0-$i" --models B0; done ;;
    largest-limits) largest largest-limits --memory-limit 8GiB,16GiB,48GiB ;;
    gpus2-b0)    agent gpus2-b0 --models B0 --batch 128 --gpus 2 ;;
    gpus2-b3)    agent gpus2-b3 --models B3 --batch 64 --gpus 2 ;;
    gpus2-fast-b0) agent gpus2-fast-b0 --models B0 --batch 512 --gpus 2 $FAST ;;
    gpus2-fast-b3) agent gpus2-fast-b3 --models B3 --batch 256 --gpus 2 $FAST ;;
    gpus2-fast-b7) agent gpus2-fast-b7 --models B7 --batch 48 --gpus 2 $FAST ;;
    profile-b0)  profile profile-b0 b0-f32-128:batch=128 \
                   b0-f32-128-aug:batch=128,aug=batched \
                   b0-f32-128-aug-bn:batch=128,aug=batched,bn=fused \
                   b0-f32-128-aug-bn-cf:batch=128,aug=batched,bn=fused,format=first \
                   b0-bf16-512-aug:batch=512,precision=mixed_bfloat16,aug=batched \
                   b0-bf16-512-aug-bn:batch=512,precision=mixed_bfloat16,aug=batched,bn=fused \
                   b0-bf16-512-aug-bn-cf:batch=512,precision=mixed_bfloat16,aug=batched,bn=fused,format=first \
                   b0-bf16-512-noaug-bn:batch=512,precision=mixed_bfloat16,aug=none,bn=fused ;;
    profile-graphs) profile profile-graphs \
                   b0-bf16-512-all:batch=512,precision=mixed_bfloat16,aug=batched,bn=fused,format=first \
                   b0-bf16-512-graphs:batch=512,precision=mixed_bfloat16,aug=batched,bn=fused,format=first,graphs=1 ;;
    profile-b7)  profile profile-b7 \
                   b7-bf16-32-aug-bn:model=B7,batch=32,precision=mixed_bfloat16,aug=batched,bn=fused,steps=4 \
                   b7-bf16-32-aug-bn-cf:model=B7,batch=32,precision=mixed_bfloat16,aug=batched,bn=fused,format=first,steps=4 ;;
    profile-fast) profile profile-fast \
                   b0-f32-128-all:batch=128,aug=batched,bn=fused,format=first \
                   b0-bf16-512-all:batch=512,precision=mixed_bfloat16,aug=batched,bn=fused,format=first ;;
    shape-setup) for variant in base v7 mode-b eager-modules no-tf32 benchmark; do
                   flags=(); envs=()
                   case $variant in
                     v7) envs=(TORCH_CUDNN_V8_API_DISABLED=1) ;;
                     mode-b) envs=(TORCH_CUDNN_USE_HEURISTIC_MODE_B=1) ;;
                     eager-modules) envs=(CUDA_MODULE_LOADING=EAGER) ;;
                     no-tf32) flags=(--no-cudnn-tf32) ;;
                     benchmark) flags=(--cudnn-benchmark) ;;
                   esac
                   echo "== shape-setup $variant: ${envs[*]} bench/trial_costs.py --model B0 --batches 16,128,512,16 --steps 3 ${flags[*]}" \
                     | tee -a "$WORK/commands.txt"
                   env "${envs[@]}" python3 "$ROOT/bench/trial_costs.py" --model B0 \
                     --batches 16,128,512,16 --steps 3 "${flags[@]}" \
                     --out "$WORK/shape-setup-$variant.json" 2>"$WORK/logs/shape-setup-$variant.log" \
                     | tee "$WORK/shape-setup-$variant.txt"
                 done ;;
    collector)   python3 "$ROOT/bench/collector_bench.py" --runs 20000 --submissions 4000 \
                   --queries 20 --skip-compare --server-cpus 0,1 --client-cpus 2-9 \
                   | tee "$WORK/collector-bench.txt" ;;
    *) echo "unknown step $step" >&2 ;;
  esac
  # After every step, so that a call cut off by its time limit still brings back
  # everything up to the step it was in.
  python3 "$ROOT/bench/summarize_runs.py" "$WORK/spool" >"$OUT/summary.txt"
  tar -C "$WORK" -czf "$OUT/evidence.tar.gz" .
done
cat "$OUT/summary.txt"
