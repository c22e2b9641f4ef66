"""--cuda-graphs on the CPU: where its random numbers come from, what a failure says.

Replaying a graph only advances torch's default generator, so the workload makes
Keras's torch random functions draw from it (the graphs themselves need a GPU:
tests/gpu/test_cuda_graphs.py). In a child process with Keras on torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# Keras on torch in a child: a framework started, make test-e2e.
pytestmark = pytest.mark.slow

SCRIPT = r"""
import json
import keras, torch
from gpubench.agent.workload import cuda_graphs

seed = keras.random.SeedGenerator(1)
before = [float(v) for v in keras.random.uniform((4,), seed=seed)]
cuda_graphs.draw_from_default_generator()
cuda_graphs.draw_from_default_generator()  # a second call changes nothing
torch.manual_seed(7)
first = [float(v) for v in keras.random.uniform((4,), seed=seed)]
second = [float(v) for v in keras.random.uniform((4,), seed=seed)]
torch.manual_seed(7)
expected = [float(v) for v in torch.rand(4)]
print(json.dumps({"before": before, "first": first, "second": second, "expected": expected}))
"""


def test_keras_random_draws_from_the_default_generator() -> None:
    found = _run(SCRIPT)
    assert found["first"] == found["expected"]  # torch's default generator, seeded by torch
    assert found["second"] != found["first"]  # and it advances
    assert found["before"] != found["first"]


CAPTURE_ERROR = r"""
import json
from gpubench.agent.workload.error_text import error_line
from gpubench.agent.workload.cuda_graphs import _first_error, _where

def optimizer_step():
    raise RuntimeError("operation not permitted when stream is capturing")

try:
    try:
        optimizer_step()
    except RuntimeError:
        raise RuntimeError("operation failed due to a previous error during capture")
except RuntimeError as ended:
    first = _first_error(ended)
print(json.dumps({"first": str(first), "where": _where(first), "line": error_line(first)}))
"""


def test_a_failed_capture_names_the_first_error_and_where() -> None:
    # When an operation fails inside a capture, ending the capture fails too.
    found = _run(CAPTURE_ERROR)
    assert found["first"] == "operation not permitted when stream is capturing"
    assert found["where"].startswith("<string>:") and "optimizer_step" in found["where"]
    assert found["line"] == "RuntimeError: operation not permitted when stream is capturing"


def _run(script: str) -> dict:
    env = {**os.environ, "KERAS_BACKEND": "torch"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
