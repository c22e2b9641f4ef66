"""The batch search in a `workload search` process beside the run (search_beside).

A real child process on the CPU (its trials are trial processes there; on a GPU
they are warm, in the child): its events reach the run's stream as they come, its
answer becomes the run's SearchResult, and a failure in it is the run's failure.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from gpubench.agent.workload.batch_search import TrialFailed
from gpubench.agent.workload.search_beside import SearchBeside, command
from gpubench.events import EventWriter, parse_line
from gpubench.settings import RunSettings

SMALL = {"model": "B0", "backend": "torch", "gpus": 0, "image_size": 32, "trial_steps": 1,
         "limit_images": 240}


@pytest.fixture(autouse=True)
def private_cache(dataset_cache, monkeypatch) -> None:
    monkeypatch.setenv("GPUBENCH_CACHE", str(dataset_cache))


def relayed(stream: io.StringIO) -> list:
    return [parse_line(line) for line in stream.getvalue().splitlines()]


def test_the_child_is_the_search_command_with_the_run_s_settings() -> None:
    settings = RunSettings(**SMALL, batch_rule="largest", max_trials=3, precision="mixed_bfloat16")
    line = command(settings)
    assert line[line.index("-m") + 1:line.index("-m") + 3] == ["gpubench.agent.workload", "search"]
    assert line[line.index("--batch") + 1] == "largest"
    assert line[line.index("--max-trials") + 1] == "3"
    assert line[line.index("--precision") + 1] == "mixed_bfloat16"


@pytest.mark.slow
def test_the_child_s_trials_are_relayed_and_its_choice_is_the_run_s() -> None:
    stream = io.StringIO()
    settings = RunSettings(**SMALL, max_trials=2)
    with SearchBeside(settings, EventWriter(stream)) as beside:
        batch, found = beside.result()
    events = relayed(stream)
    kinds = [e.kind for e in events]
    assert kinds[0] == "phase" and events[0].phase == "search"
    trials = [e for e in events if e.kind == "batch_trial"]
    # No memory figure on the CPU without a cap: the search doubles, two trials at most.
    assert [t.batch for t in trials] == [t.batch for t in found.trials] == [16, 64]
    assert found.stopped_by == "trials" and found.seconds > 0
    chosen = [e for e in events if e.kind == "batch_chosen"]
    assert len(chosen) == 1 and chosen[0].batch == batch
    assert found.largest == 64 and batch == 16  # the speed rule: 8 steps of 192 images
    # The agent's largest-batch answer is not part of a run.
    assert "search_done" not in kinds and "error" not in kinds


@pytest.mark.slow  # a real search child: a framework started, make test-e2e
def test_a_failure_in_the_child_is_the_run_s_with_its_message() -> None:
    stream = io.StringIO()
    # 64 MiB of address space: the trial processes cannot even load Python's modules,
    # which is no "does not fit": the search stops and says why.
    settings = RunSettings(**SMALL, max_trials=2, trial_address_space=64 * 2**20)
    with SearchBeside(settings, EventWriter(stream)) as beside:
        with pytest.raises(TrialFailed, match="the trial at batch 16 failed"):
            beside.result()
    assert "error" not in [e.kind for e in relayed(stream)]  # the run reports its own


def test_leaving_early_stops_the_child() -> None:
    with SearchBeside(RunSettings(**SMALL), EventWriter(io.StringIO())) as beside:
        process = beside._process
    assert process is not None and process.poll() is not None
    assert "TORCH_CUDNN_V8_API_DISABLED" not in os.environ  # the child's, never the run's


# A second real search of the same settings: make test-e2e.
@pytest.mark.slow
@pytest.mark.e2e
def test_the_run_imports_and_decodes_while_the_child_searches(dataset_cache) -> None:
    """runner.search_while_loading in a process of its own (it selects a backend): the
    run's framework import and its images' decoding come while the child searches."""
    script = (
        "import sys\n"
        "from gpubench.agent.workload import runner\n"
        "from gpubench.events import EventWriter\n"
        "from gpubench.settings import RunSettings\n"
        f"settings = RunSettings(**{SMALL!r}, max_trials=2)\n"
        "dataset = runner.load_dataset(settings)\n"
        "choice = runner.search_while_loading(settings, dataset, EventWriter(sys.stdout))\n"
        "from gpubench.agent.workload import pipeline\n"
        "feed = pipeline.build_feed(dataset, size=32, global_batch=choice.batch,\n"
        "                           pipeline='cached', seed=1)\n"
        "print(choice.batch, choice.choice, feed.decode_seconds > 0, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, check=False,
                          env={**os.environ, "GPUBENCH_CACHE": str(dataset_cache)})
    assert done.returncode == 0, done.stderr[-3000:]
    events = [e for e in map(parse_line, done.stdout.splitlines()) if e is not None]
    logs = [e.message for e in events if e.kind == "log"]
    assert "decoding 240 images at 32x32 into memory" in logs
    assert any("ran in its own process" in line for line in logs)
    assert [e.batch for e in events if e.kind == "batch_trial"] == [16, 64]
    # build_feed took the images decoded ahead, with the seconds that took.
    assert done.stderr.strip().splitlines()[-1] == "16 searched True"


TINY = os.path.join(os.path.dirname(__file__), "tiny_models.py")


@pytest.mark.e2e
@pytest.mark.parametrize(("builder", "decoded"), [
    ("cnn", "decoding 240 images at 32x32 into memory"),  # photos at the model's own size
    ("language_model", None),                            # tokens: no photos to decode
])
def test_a_model_of_its_own_is_decoded_ahead_as_it_is_fed(dataset_cache, builder: str,
                                                          decoded: str | None) -> None:
    """The run decodes ahead what the model takes, as its check says: the photos at the
    model's input size (the settings name none for such a model), nothing for a model
    fed tokens."""
    model = f"{TINY}:{builder}"
    script = (
        "import sys\n"
        "from gpubench.agent.workload import model_check, runner\n"
        "from gpubench.events import EventWriter\n"
        "from gpubench.settings import RunSettings\n"
        f"settings = RunSettings(model={model!r}, backend='torch', gpus=0, trial_steps=1,\n"
        "                        limit_images=240, max_trials=2)\n"
        "identity = model_check.check(settings)\n"
        "dataset = runner.load_dataset(settings, identity)\n"
        "choice = runner.search_while_loading(settings, dataset, EventWriter(sys.stdout),\n"
        "                                     identity)\n"
        "print(choice.batch, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=900, check=False,
                          env={**os.environ, "GPUBENCH_CACHE": str(dataset_cache)})
    assert done.returncode == 0, done.stderr[-3000:]
    events = [e for e in map(parse_line, done.stdout.splitlines()) if e is not None]
    decoding = [e.message for e in events if e.kind == "log" and e.message.startswith("decoding")]
    assert decoding == ([decoded] if decoded else [])
    assert int(done.stderr.strip().splitlines()[-1]) > 0
