"""The math mode: one setting for how float32 convolutions and matrix products run, set on
the framework and read back from it into the run's result (the record's Config.math_mode).

The workload runs as the agent starts it (a real child process, torch on the CPU, which
keeps the switches a GPU would read), on a tiny language model and a few dozen samples."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpubench.settings import MATH_FLOAT32, MATH_TF32

pytestmark = pytest.mark.slow

TINY = Path(__file__).resolve().parent / "tiny_models.py"

# torch's own defaults, then each mode set and read back, in a process of its own (the
# tests' process never imports a framework).
ROUND_TRIP = """
from gpubench.agent.workload.frameworks import get
import torch
torch_ = get("torch")
print(torch_.math_mode())
for mode in ("float32", "tf32"):
    torch_.set_math_mode(mode)
    print(mode, torch_.math_mode(), torch.backends.cudnn.allow_tf32,
          torch.backends.cuda.matmul.allow_tf32)
"""


def test_torch_reads_back_the_mode_it_was_set_to_and_names_its_own_defaults() -> None:
    done = subprocess.run([sys.executable, "-c", ROUND_TRIP], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:3] == [
        "tf32-convolutions",  # torch's own: TF32 convolutions, float32 matrix products
        "float32 float32 False False",
        "tf32 tf32 True True",
    ]


# Each backend's mode set and read back through its framework's own switch.
BOTH_WAYS = """
import sys
from gpubench.agent.workload.frameworks import get
framework = get(sys.argv[1])
for mode in ("float32", "tf32"):
    framework.set_math_mode(mode)
    print(framework.math_mode())
"""


def test_tensorflow_reads_back_the_mode_it_was_set_to() -> None:
    done = subprocess.run([sys.executable, "-c", BOTH_WAYS, "tensorflow"], capture_output=True,
                          text=True, timeout=300, check=False,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["float32", "tf32"]


@pytest.mark.parametrize(("asked", "recorded"), [((), MATH_TF32),
                                                 (("--math-mode", "float32"), MATH_FLOAT32)])
def test_the_result_names_the_math_mode_that_ran(workload, asked: tuple[str, ...],
                                                 recorded: str) -> None:
    done = workload("run", "--model", f"{TINY}:language_model", "--backend", "torch",
                    "--gpus", "0", "--limit-images", "40", "--batch", "4", *asked)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.one("result").math_mode == recorded
