"""The three commands say one idea with one flag: the token from --token-file or
$GPUBENCH_TOKEN (gpubench's old --token works, hidden, for one release), --tls and --ca
on every client of a collector. Against a real collector (gRPC on port 0, DuckDB)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from terminal import on_a_terminal

from gpubench.agent.cli import main as agent
from gpubench.cli import cli
from gpubench.cli_vocabulary import GPU_RULE, MEMORY_SIZE, TRAIN_IMAGES
from gpubench.client import Client
from gpubench.collector.cli import cli as collector_cli
from gpubench.errors import ExitCode

CLEAN_ENV = {"GPUBENCH_TOKEN": None, "GPUBENCH_TOKEN_FILE": None, "GPUBENCH_COLLECTOR": None}


@pytest.fixture
def token_file(collector: Any, tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(collector.make_token("lab") + "\n")
    return path


@pytest.mark.parametrize("where", ["before", "after"])
def test_gpubench_reads_the_token_from_a_file(collector: Any, token_file: Path,
                                              make_run: Any, where: str) -> None:
    with Client(collector.address, collector.admin_token) as client:
        client.submit_run(make_run())
    connection = ["--collector", collector.address, "--token-file", str(token_file)]
    args = [*connection, "runs", "list", "--format", "json"] if where == "before" else \
        ["runs", "list", "--format", "json", *connection]
    done = CliRunner(env=CLEAN_ENV).invoke(cli, args)
    assert done.exit_code == 0, done.output
    assert len(json.loads(done.stdout)) == 1


def test_a_wrong_token_file_names_the_flag(collector: Any, tmp_path: Path) -> None:
    wrong = tmp_path / "token"
    wrong.write_text("gpb_wrong\n")
    done = CliRunner(env=CLEAN_ENV).invoke(
        cli, ["--collector", collector.address, "--token-file", str(wrong), "runs", "list"])
    assert done.exit_code == 4, done.output
    assert "--token-file" in done.output


def test_an_empty_token_file_is_a_usage_error(tmp_path: Path) -> None:
    empty = tmp_path / "token"
    empty.write_text("\n")
    done = CliRunner(env=CLEAN_ENV).invoke(cli, ["--token-file", str(empty), "runs", "list"])
    assert done.exit_code == 2 and "holds no token" in done.output, done.output


def test_the_old_token_flag_still_works_but_is_not_offered(collector: Any) -> None:
    done = CliRunner(env=CLEAN_ENV).invoke(
        cli, ["--collector", collector.address, "--token", collector.admin_token, "runs",
              "list", "--format", "json"])
    assert done.exit_code == 0, done.output
    helps = CliRunner().invoke(cli, ["--help"]).output + \
        CliRunner().invoke(cli, ["runs", "list", "--help"]).output
    assert "--token-file" in helps and "--token " not in helps


@pytest.mark.parametrize(("group", "args"), [(cli, ["--help"]), (agent, ["run", "--help"]),
                                             (agent, ["push", "--help"])])
def test_every_client_offers_tls_ca_and_the_token_file(group: Any, args: list[str]) -> None:
    text = CliRunner().invoke(group, args).output
    for flag in ("--tls", "--ca", "--token-file"):
        assert flag in text, (flag, text)


def test_the_three_commands_help_at_80_columns_in_a_wide_terminal() -> None:
    for group, args in ((cli, ["--help"]), (cli, ["compare", "--help"]),
                        (agent, ["run", "--help"]), (collector_cli, ["serve", "--help"])):
        text = CliRunner(env={"COLUMNS": "200"}).invoke(group, args).output
        assert max(map(len, text.splitlines())) <= 80, text


@pytest.mark.parametrize("flag", [["--format", "json"], ["--json"]])
def test_the_agent_says_json_with_format_as_gpubench_does(tmp_path: Path,
                                                          flag: list[str]) -> None:
    """--format json, and --json, the old spelling kept hidden, print the same listing."""
    done = CliRunner(env=CLEAN_ENV).invoke(agent, ["status", "--spool", str(tmp_path),
                                                   *flag])
    assert done.exit_code == 0, done.output
    json.loads(done.stdout)
    assert "--json" not in CliRunner().invoke(agent, ["status", "--help"]).output


# -- one meaning for --gpu, --memory-limit and --train-images ------------------------------

T4, H200 = "Tesla T4", "NVIDIA H200"
# Each gpubench command that takes --gpu, as a person runs it; the GPU's name comes last.
GPU_COMMANDS = {
    "compare": ["compare", "--model", "B0", "--format", "json", "--gpu"],
    "runs list": ["runs", "list", "--format", "json", "--gpu"],
    "estimate": ["estimate", "--model", "B0", "--epochs", "10", "--format", "json", "--gpu"],
    "fit": ["fit", "--model", "B0", "--memory-limit", "16GiB", "--format", "json", "--gpu"],
    "plot": ["plot", "--model", "B0", "--out", "OUT", "--gpu"],
}


@pytest.fixture
def two_gpus(collector: Any, make_run: Any) -> Any:
    """A collector holding a B0 run on a Tesla T4 and one on an NVIDIA H200."""
    with Client(collector.address, collector.admin_token) as admin:
        for gpu in (T4, H200):
            admin.submit_run(make_run(gpu_name=gpu))
    return collector


def _asking(collector: Any, args: list[str]) -> Any:
    return CliRunner(env=CLEAN_ENV).invoke(
        cli, ["--collector", collector.address, "--token-file", "-", *args],
        input=collector.admin_token + "\n")


@pytest.mark.parametrize("command", GPU_COMMANDS)
def test_gpu_is_a_whole_name_in_any_case_in_every_command(two_gpus: Any, command: str,
                                                          tmp_path: Path) -> None:
    charts = tmp_path / "charts"
    args = [str(charts) if arg == "OUT" else arg for arg in GPU_COMMANDS[command]]
    done = _asking(two_gpus, [*args, "tesla  T4"])
    assert done.exit_code == 0, done.output
    assert H200 not in done.stdout
    if command == "plot":
        assert sorted(path.name for path in charts.iterdir()) == [
            "b0-energy.png", "b0-epoch-time.png", "b0-peak-memory.png", "b0-throughput.png"]
    else:
        assert T4 in done.stdout
    for part, closest in (("T4", T4), ("h200", H200), ("Tesla T5", T4)):
        refused = _asking(two_gpus, [*args, part])
        said = " ".join(refused.stderr.split())
        assert refused.exit_code == ExitCode.NOT_FOUND, refused.output
        assert f"gpubench: error: --gpu {part!r}: no GPU with runs" in said, said
        assert f"is named so; did you mean {closest}?" in said, said
        assert f"{H200}, {T4})" in said, said


def test_the_baseline_is_named_as_a_gpu_is(two_gpus: Any) -> None:
    done = _asking(two_gpus, ["compare", "--model", "B0", "--baseline", "nvidia h200",
                              "--format", "json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["baseline"].endswith(H200)
    refused = _asking(two_gpus, ["compare", "--model", "B0", "--baseline", "H200"])
    assert refused.exit_code == ExitCode.NOT_FOUND, refused.output
    assert "--baseline 'H200': no GPU with runs of B0 is named so; did you mean NVIDIA " \
        "H200?" in " ".join(refused.stderr.split())


@pytest.mark.parametrize("command", list(GPU_COMMANDS))
def test_every_gpu_option_states_the_one_rule(command: str) -> None:
    assert " ".join(GPU_RULE.split()) in _help_words(cli, command.split())


def _help_words(group: Any, args: list[str]) -> str:
    """A command's --help as one line of words; a flag click broke at a hyphen where it
    wrapped ("--train-" and "images") whole again."""
    words = " ".join(CliRunner().invoke(group, [*args, "--help"]).output.split())
    return re.sub(r"(\w)- (\w)", r"\1-\2", words)


@pytest.mark.parametrize(("group", "args"), [(cli, ["fit"]), (agent, ["run"]),
                                             (agent, ["largest-batch"])])
def test_a_gpus_memory_is_one_flag_with_one_help(group: Any, args: list[str]) -> None:
    text = _help_words(group, args)
    assert "--memory-limit SIZE" in text and " ".join(MEMORY_SIZE.split()) in text, text
    assert "--memory " not in text


@pytest.mark.parametrize(("group", "args"), [
    (cli, ["fit", "--model", "B7", "--memory-limit", "8"]),
    (agent, ["run", "--offline", "--memory-limit", "8"]),
    (agent, ["largest-batch", "--memory-limit", "16GiB,8"]),
])
def test_a_memory_without_its_unit_is_refused_alike(group: Any, args: list[str]) -> None:
    done = CliRunner(env=CLEAN_ENV).invoke(group, args)
    assert done.exit_code == ExitCode.USAGE, done.output
    assert "--memory-limit: '8' has no unit: write 8GiB for 8 GiB" in \
        " ".join(done.output.split())


@pytest.mark.parametrize(("group", "args"), [(cli, ["estimate"]), (agent, ["run"]),
                                             (agent, ["largest-batch"])])
def test_training_images_are_one_flag_with_one_help(group: Any, args: list[str]) -> None:
    text = _help_words(group, args)
    assert "--train-images N" in text and " ".join(TRAIN_IMAGES.split()) in text, text
    assert "--images" not in text and "--limit-images" not in text


def test_every_help_of_the_three_commands_is_at_most_80_columns() -> None:
    """Every command and subcommand, in a terminal of 200 columns."""
    def helps(group: click.Command, path: list[str]) -> Any:
        yield path
        for name, sub in getattr(group, "commands", {}).items():
            if not sub.hidden:
                yield from helps(sub, [*path, name])

    for group in (cli, agent, collector_cli):
        for path in helps(group, []):
            text = CliRunner(env={"COLUMNS": "200"}).invoke(group, [*path, "--help"]).output
            assert max(map(len, text.splitlines())) <= 80, (path, text)


# -- an old spelling works as it did and says the new one, to a person ---------------------


def _gpubench(collector: Any) -> list[str]:
    return [str(Path(sys.executable).with_name("gpubench")), "--collector", collector.address]


def _env(collector: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUBENCH_")}
    return {**env, "GPUBENCH_TOKEN": collector.admin_token, "COLUMNS": "80"}


@pytest.mark.parametrize(("old", "new", "said"), [
    (["estimate", "--model", "B0", "--epochs", "10", "--images", "3418"],
     ["estimate", "--model", "B0", "--epochs", "10", "--train-images", "3418"],
     "gpubench: note: --images is now --train-images; --images goes in the next release"),
    (["fit", "--model", "B0", "--memory", "16GiB"],
     ["fit", "--model", "B0", "--memory-limit", "16GiB"],
     "gpubench: note: --memory is now --memory-limit; --memory goes in the next release"),
])
def test_an_old_spelling_answers_alike_and_tells_a_person_the_new_one(
        two_gpus: Any, old: list[str], new: list[str], said: str) -> None:
    command, env = _gpubench(two_gpus), _env(two_gpus)
    before = on_a_terminal([*command, *old, "--format", "json"], env)
    after = on_a_terminal([*command, *new, "--format", "json"], env)
    assert before.returncode == after.returncode == 0, before.terminal
    assert json.loads(before.stdout) == json.loads(after.stdout)
    assert said in before.terminal and "note:" not in after.terminal
    # A script (stderr no terminal) gets the answer and nothing more.
    piped = subprocess.run([*command, *old], env=env, capture_output=True, text=True,
                           check=False)
    assert piped.returncode == 0 and "note:" not in piped.stderr, piped.stderr
    hidden = CliRunner().invoke(cli, [old[0], "--help"]).output
    assert old[-2] not in hidden.split()
