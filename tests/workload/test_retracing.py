"""How often Keras on TensorFlow traces the training and validation steps, in the
workload's own run with a partial last batch: at least once (the step is compiled as a
graph, not run one operation at a time, which made Keras on JAX measure Python's dispatch:
docs/results/h200-jax.md) and at most once per batch shape, never once a step.

The run is the real workload on the CPU, in a process of its own, with tf.function
counted: every function Keras makes with it is kept, and its tracing count printed when
the run ends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# tf.function replaced, once the workload has selected its backend, by one that keeps
# what it makes; the workload's `run` runs in this process, and each function's tracing
# count is printed when it ends (to stderr: the workload keeps stdout for its events).
COUNTING_RUN = r"""
import json, sys
from gpubench.agent.workload import backend

made = []
select = backend.select

def counting_select(*args, **kwargs):
    # Once the backend is selected (TensorFlow imports Keras): count what tf.function makes.
    chosen = select(*args, **kwargs)
    import tensorflow as tf
    original = tf.function

    def counting(func=None, **options):
        if func is None:
            return lambda f: counting(f, **options)
        made.append(original(func, **options))
        return made[-1]

    tf.function = counting
    return chosen

backend.select = counting_select
from gpubench.agent.workload.cli import main

try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    print(json.dumps({"traced": [f.experimental_get_tracing_count() for f in made]}))
"""

# 45 images: 36 to train at batch 16 (two full steps and one of 4), 9 to validate (one
# partial step); two epochs, so a step traced every time would be traced 6 times.
RUN = ("run", "--backend", "tensorflow", "--gpus", "0", "--model", "B0", "--image-size", "32",
       "--limit-images", "45", "--batch", "16", "--epochs", "2")


def test_tensorflow_traces_each_step_once_per_batch_shape(tmp_path: Path) -> None:
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "GPUBENCH_CACHE": str(tmp_path),
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, "-c", COUNTING_RUN, *RUN], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    epochs = [e for e in events if e.get("event") == "epoch_finished"]
    assert [e["steps"] for e in epochs] == [3, 3], epochs  # two full steps and a partial one
    [counted] = [line for line in done.stderr.splitlines() if line.startswith('{"traced"')]
    traced = json.loads(counted)["traced"]
    assert max(traced, default=0) >= 1, traced  # compiled as a graph, not run eagerly
    assert max(traced) <= 2, traced  # the full and the partial batch, each once
