"""The private Keras internals the torch fast paths patch (gpubench.agent.workload.keras_internals).

Against the installed Keras, in child processes with Keras on torch: every
internal torch_async and cuda_graphs touch is there with the signature they were
written against, the step factories make one-argument steps, HostSeeds draws
SeedGenerator.next's sequence, and pyproject.toml pins Keras to the tested range.
Then the fallback: with Keras's version made unknown, or an internal renamed, the
fast path is left out with one warning event that names the Keras version and the
tested range, and Keras's own code stays.
"""

from __future__ import annotations

import json
import os
import re

try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib
import subprocess
import sys
from pathlib import Path

import pytest

from gpubench.agent.workload import keras_internals
from gpubench.events import parse_line

pytestmark = pytest.mark.slow

MODEL = r"""
import keras

def small_model():
    model = keras.Sequential([
        keras.Input((8, 8, 3)), keras.layers.RandomRotation(0.2, seed=3),
        keras.layers.Dropout(0.3, seed=4), keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(3, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="categorical_crossentropy")
    return model
"""

SHAPES = MODEL + r"""
import inspect, json
from gpubench.agent.workload import keras_internals, torch_async
from keras.src.backend.torch import core, numpy as torch_numpy

model = small_model()
problems = {patch.name: patch.problems(model) for patch in keras_internals.PATCHES}
model.make_train_function()
model.make_test_function()
generator = keras.random.SeedGenerator(7)
host = torch_async.HostSeeds(generator)
draws = [True, True, False, True, False]
print(json.dumps({
    "problems": problems,
    "steps": [str(inspect.signature(model.train_function)),
              str(inspect.signature(model.test_function))],
    "keras_seeds": [generator.next(ordered).tolist() for ordered in draws],
    "host_seeds": [host.next(ordered).tolist() for ordered in draws],
    "bound_by_name": torch_numpy.convert_to_tensor is core.convert_to_tensor,
    "layer_generators": [type(g).__name__ for layer in model.layers
                         for g in layer._seed_generators],
}))
"""


def test_every_patched_internal_is_as_expected() -> None:
    found = _run(SHAPES)
    assert found["problems"] == {"torch_async": [], "cuda_graphs": []}
    # cuda_graphs.GraphedStep calls the made step with the batch alone.
    assert found["steps"] == ["(data)", "(data)"]
    # torch_async.HostSeeds repeats SeedGenerator.next's arithmetic, on the host.
    assert found["host_seeds"] == found["keras_seeds"]
    # torch_async rebinds convert_to_tensor in the modules that imported it by name.
    assert found["bound_by_name"] is True
    assert found["layer_generators"] == ["SeedGenerator", "SeedGenerator"]


def test_tested_versions() -> None:
    assert keras_internals.tested("3.15.1") and keras_internals.tested("3.15.0")
    for version in ("3.16.0", "3.14.1", "3.16.0.dev2026", "4.0.0", "not a version"):
        assert not keras_internals.tested(version), version


def test_pyproject_pins_keras_to_the_tested_range() -> None:
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    wanted = project["project"]
    lines = [*wanted["dependencies"], *(line for extra in wanted["optional-dependencies"].values()
                                        for line in extra)]
    pins = [line for line in lines if re.match(r"keras\b", line)]
    assert pins and set(pins) == {f"keras{keras_internals.TESTED_RANGE}"}


FALLBACK = MODEL + r"""
import json, sys
from gpubench.agent.workload import frameworks, stream, torch_async
from keras.src.backend.torch import core, random
from gpubench.events import LogEvent

events = stream.claim_stdout()
model = small_model()
if sys.argv[1] == "version":
    keras.__version__ = "3.99.0"
else:
    random.renamed_seed_generator = random.__dict__.pop("torch_seed_generator")
original = core.convert_to_tensor
torch = frameworks.get("torch")
graphs = [torch.prepare_steps(model, gpus=1, cuda_graphs=True) for _ in range(2)]
generators = [g for layer in model.layers for g in layer._seed_generators]
events.emit(LogEvent(message=json.dumps({
    "graphs": graphs,
    "converter_kept": core.convert_to_tensor is original,
    "host_seeds": sum(isinstance(getattr(g.next, "__self__", None), torch_async.HostSeeds)
                      for g in generators),
    "steps_wrapped": "make_train_function" in vars(model),
})))
"""


def test_an_unknown_keras_version_keeps_kerass_own_code() -> None:
    warnings, found = _fallback("version")
    assert found == {"graphs": [None, None], "converter_kept": True, "host_seeds": 0,
                     "steps_wrapped": False}
    assert len(warnings) == 2  # one per fast path, once however often it is prepared
    for warning, what in zip(warnings, ("(torch_async)", "(--cuda-graphs)"), strict=True):
        assert what in warning and "not applied, Keras's own code runs instead" in warning
        assert warning.endswith(f"(Keras 3.99.0; tested on keras{keras_internals.TESTED_RANGE})")
        assert "\n" not in warning


def test_a_missing_internal_leaves_out_only_its_fast_path() -> None:
    warnings, found = _fallback("renamed")
    assert len(warnings) == 1 and "CUDA graphs (--cuda-graphs) not applied" in warnings[0]
    assert "keras.src.backend.torch.random.torch_seed_generator is missing" in warnings[0]
    # The host is still kept ahead: its internals are all there.
    assert found == {"graphs": [None, None], "converter_kept": False, "host_seeds": 2,
                     "steps_wrapped": False}


def _fallback(case: str) -> tuple[list[str], dict]:
    done = subprocess.run([sys.executable, "-c", FALLBACK, case], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "KERAS_BACKEND": "torch"})
    assert done.returncode == 0, done.stderr[-3000:]
    events = [parse_line(line) for line in done.stdout.splitlines()]
    warnings = [e.message for e in events if e is not None and e.kind == "warning"]
    found = [e for e in events if e is not None and e.kind == "log"]
    return warnings, json.loads(found[-1].message)


def _run(script: str) -> dict:
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "KERAS_BACKEND": "torch"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
