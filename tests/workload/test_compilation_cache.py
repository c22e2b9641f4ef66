"""JAX's persistent compilation cache: epoch 1's XLA compilation paid once per cache folder.

Where the cache goes and what a person's own variables change (no JAX needed); the
counting of programs from JAX's monitoring events; and the real thing on the CPU:
`gpubench-agent run --backend jax` twice with one cache folder, the second run loading
every XLA program the first compiled (the short last batches' too), and the record and
the console saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpubench import record
from gpubench.agent.display import xla_words
from gpubench.agent.workload import compilation_cache
from gpubench.agent.workload.compilation_cache import (
    CACHE_HIT_EVENT,
    PROGRAM_EVENT,
    ProgramLog,
    environment,
)
from gpubench.comparison_key import key_of
from gpubench.events import XlaPrograms
from gpubench.v1 import run_pb2


def test_the_cache_goes_to_the_agents_cache_folder_and_keeps_every_program() -> None:
    assert environment(Path("/c"), {}) == {
        "JAX_COMPILATION_CACHE_DIR": "/c/jax-compilation",
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    }


def test_a_persons_own_settings_win() -> None:
    own = {"JAX_COMPILATION_CACHE_DIR": "/mine", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "5"}
    assert environment(Path("/c"), own) == {"JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}


def test_programs_are_counted_as_compiled_or_loaded() -> None:
    log = ProgramLog(lambda: True)
    before = time.monotonic()
    log.on_duration(PROGRAM_EVENT, 2.5, fun_name="train_step")  # compiled
    log.on_event(CACHE_HIT_EVENT)
    log.on_duration(PROGRAM_EVENT, 0.25, fun_name="test_step")  # loaded
    log.on_event("/jax/compilation_cache/compile_requests_use_cache")  # neither
    log.on_duration("/jax/core/compile/jaxpr_trace_duration", 1.0)  # neither
    after = time.monotonic()
    assert log.totals() == XlaPrograms(compiled=1, loaded=1, seconds=2.75, cache=True)
    assert log.epoch_warning(2, after + 1, after + 2) is None
    assert log.epoch_warning(2, before, after) == (
        "epoch 2 compiled or loaded 2 XLA program(s): its time includes XLA's work, not "
        "only the training's")


def test_the_console_says_it_in_a_few_words() -> None:
    warm = XlaPrograms(compiled=0, loaded=215, seconds=2.28, cache=True)
    assert xla_words(warm) == "XLA: 0 programs compiled, 215 from the cache (2.3 s)"
    cold = XlaPrograms(compiled=1, loaded=0, seconds=64.5, cache=False)
    assert xla_words(cold) == "XLA: 1 program compiled in 64.5 s (no compilation cache)"


# 44 images: 36 to train at batch 16 (two full steps and a short one of 4), 8 to validate
# (one short step): each short batch is a program of its own.
RUN = ("run", "--backend", "jax", "--gpus", "0", "--models", "B0", "--image-size", "32",
       "--train-images", "36", "--batch", "16", "--offline", "--format", "json")


def _agent_run(cache: Path, spool: Path) -> tuple[run_pb2.Run, str]:
    """One `gpubench-agent run` of RUN with `cache` as its cache folder: its record and
    its console."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUBENCH_", "JAX_", "XLA_", "KERAS_"))}
    env.update(GPUBENCH_CACHE=str(cache), GPUBENCH_SPOOL=str(spool), COLUMNS="80")
    done = subprocess.run([sys.executable, "-m", "gpubench.agent.cli", *RUN], env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    [data] = json.loads(done.stdout)
    return record.from_dict(data), done.stderr


@pytest.mark.slow
def test_a_second_run_loads_every_program_the_first_compiled(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first, _ = _agent_run(cache, tmp_path / "spool1")
    second, console = _agent_run(cache, tmp_path / "spool2")
    cold, warm = first.result.xla_programs, second.result.xla_programs
    epoch_1 = [next(e.wall_seconds for e in r.result.epochs if e.number == 1)
               for r in (first, second)]
    print(f"\nCPU, B0 at 32 px, 36 training images at batch 16: epoch 1 "
          f"{epoch_1[0]:.1f} s (cold cache: {xla_words(cold)}), "
          f"{epoch_1[1]:.1f} s (warm: {xla_words(warm)})")

    assert first.result.HasField("xla_programs") and cold.cache
    assert cold.compiled > 0
    assert warm.compiled == 0 and warm.loaded == cold.compiled + cold.loaded
    assert warm.seconds < cold.seconds  # loading, not compiling
    assert any((cache / compilation_cache.FOLDER).iterdir())
    # Every batch shape, the short last ones too, was compiled in epoch 1: epoch 2 of the
    # cold run waited for no program.
    for run in (first, second):
        assert not [w for w in run.result.warnings if "XLA program" in w], run.result.warnings
        assert [e.number for e in run.result.epochs] == [1, 2]
    assert f"B0: {xla_words(warm)}" in console
    # A warm cache shortens epoch 1 only: the two runs compare like for like.
    assert key_of(first) == key_of(second)
