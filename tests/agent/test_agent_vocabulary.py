"""`gpubench-agent` says what the record and `gpubench` say: --settings LABEL (the record's
settings label) for the on/off switches, --train-images N (the record's training images)
for the images a run uses. Real agent processes and the stand-in workload, each of its
command lines written down by a wrapper in front of it; the old spellings work one
release more and tell a person at a terminal the new one."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from terminal import on_a_terminal
from test_agent_cli import AGENT, agent, agent_env

from gpubench.errors import ExitCode
from gpubench.settings_cli import label_switches

# Each switch's two flags, as the workload takes them, in the schema's order.
KERAS = ["--no-jit-compile", "--no-cuda-graphs", "--data-on-host", "--keras-augmentation",
         "--keras-batchnorm", "--channels-last"]


@pytest.fixture
def logged(tmp_path: Path, fake_workload_command: list[str]) -> tuple[dict, Path]:
    """The agent's environment with a workload that writes each command line it is given
    (one JSON list a line) to the returned file, then is the stand-in workload."""
    log = tmp_path / "workload-argv.jsonl"
    wrapper = tmp_path / "logging_workload.py"
    wrapper.write_text(
        "import json, os, sys\n"
        f"with open({str(log)!r}, 'a') as log:\n"
        "    log.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"os.execv(sys.executable, [sys.executable, *{fake_workload_command[1:]!r}, "
        "*sys.argv[1:]])\n")
    env = agent_env(tmp_path, None, GPUBENCH_WORKLOAD_COMMAND=shlex.join(
        [sys.executable, str(wrapper)]), KERAS_BACKEND="tensorflow")
    return env, log


def _given(log: Path, command: str) -> list[list[str]]:
    """The workload's command lines of `command` ("run", "search")."""
    lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [argv[1:] for argv in lines if argv and argv[0] == command]


def _value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


OFFLINE = ["run", "--models", "B0", "--batch", "8", "--offline", "--format", "json"]


def test_train_images_reach_the_workload_as_the_images_that_train_so_many(logged) -> None:
    env, log = logged
    done = agent([*OFFLINE, "--train-images", "192"], env)
    assert done.returncode == 0, done.stderr
    [argv] = _given(log, "run")
    # 239 images, of which int(0.2 x 239) = 47 are held out: 192 train each epoch.
    assert _value(argv, "--limit-images") == "239"


def test_the_old_limit_images_still_counts_every_image(logged) -> None:
    env, log = logged
    done = agent([*OFFLINE, "--limit-images", "240"], env)
    assert done.returncode == 0, done.stderr
    [argv] = _given(log, "run")
    assert _value(argv, "--limit-images") == "240"
    assert "note:" not in done.stderr  # a script is told nothing
    both = agent([*OFFLINE, "--limit-images", "240", "--train-images", "192"], env)
    assert both.returncode == ExitCode.USAGE and "give --train-images" in both.stderr


def test_largest_batch_takes_train_images_too(logged) -> None:
    env, log = logged
    done = agent(["largest-batch", "--models", "B0", "--train-images", "1709",
                  "--format", "json"], env)
    assert done.returncode == 0, done.stderr
    [argv] = _given(log, "search")
    assert _value(argv, "--limit-images") == "2136"  # the protocol's whole set


def test_settings_gives_every_switch_as_the_label_says(logged) -> None:
    env, log = logged
    done = agent([*OFFLINE, "--settings", "keras"], env)
    assert done.returncode == 0, done.stderr
    [argv] = _given(log, "run")
    assert [flag for flag in argv if flag in KERAS] == KERAS
    [record] = json.loads(done.stdout)
    assert record["config"]["model"] == "B0"


@pytest.mark.parametrize(("args", "said"), [
    (["--settings", "kernel+cuda-graph"],
     "--settings: 'kernel+cuda-graph' is not a settings label: keras, or the options on "
     "joined by +"),
    (["--settings", "kernels", "--backend", "tensorflow"],
     "--settings kernels: --batched-augmentation needs --backend torch"),
    (["--settings", "keras", "--no-cuda-graphs"],
     "--settings and --no-cuda-graphs: give the settings once, in --settings"),
])
def test_a_settings_label_the_run_cannot_take_is_refused_before_it_runs(
        logged, args: list[str], said: str) -> None:
    env, log = logged
    done = agent([*OFFLINE, *args], env)
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert said in " ".join(done.stderr.split())
    assert not _given(log, "run")


def test_a_wrong_label_names_the_closest() -> None:
    with pytest.raises(Exception, match="did you mean kernels\\+cuda-graphs"):
        label_switches("kernel+cuda-graph")


@pytest.mark.parametrize(("args", "said"), [
    (["--no-cuda-graphs"],
     "gpubench-agent: note: --no-cuda-graphs is now --settings keras; --no-cuda-graphs "
     "goes in the next release"),
    (["--limit-images", "240"],
     "gpubench-agent: note: --limit-images 240 is now --train-images 192; --limit-images "
     "240 goes in the next release"),
])
def test_an_old_spelling_tells_a_person_the_new_one(logged, args: list[str],
                                                    said: str) -> None:
    env, log = logged
    done = on_a_terminal([*AGENT, *OFFLINE, *args], env)
    assert done.returncode == 0, done.terminal
    assert said in done.terminal, done.terminal
    [argv] = _given(log, "run")
    assert args[0] in argv  # and it runs as it did


def test_the_old_json_flag_tells_a_person_the_new_one(tmp_path: Path) -> None:
    done = on_a_terminal([*AGENT, "status", "--json"], agent_env(tmp_path, None))
    assert done.returncode == 0 and json.loads(done.stdout)["counts"]["pending"] == 0
    assert "gpubench-agent: note: --json is now --format json" in done.terminal


@pytest.mark.parametrize("command", ["run", "largest-batch"])
def test_the_old_spellings_are_not_offered(command: str) -> None:
    from click.testing import CliRunner

    from gpubench.agent.cli import main

    text = CliRunner().invoke(main, [command, "--help"]).output
    for old in ("--limit-images", "--no-cuda-graphs", "--cuda-graphs", "--jit-compile",
                "--keras-augmentation", "--data-on-device", "--channels-first", "--json"):
        assert old not in text.split(), old
