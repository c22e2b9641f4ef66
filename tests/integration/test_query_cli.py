"""The `gpubench` query CLI against a real collector: the console script as a subprocess
for exit codes and scripts' output, click's runner for the rest."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pandas as pd
import pytest
from click.testing import CliRunner
from factories import CARDS, TRAIN_IMAGES

from gpubench import frames
from gpubench.cli import cli
from gpubench.client import Client
from gpubench.errors import ExitCode

GIB = 1024**3
GPUBENCH = Path(sys.executable).with_name("gpubench")
T4 = "Tesla T4"
ADA = "NVIDIA RTX 6000 Ada Generation"
# Epoch-2 times submitted below: medians 17.0 s and 1.0 s, so 2x Ada is 17.0x the T4.
T4_SECONDS = (17.0, 17.6, 16.4)
ADA_SECONDS = (1.0, 1.04, 0.97)
T4_FIGURES = {"energy_per_epoch_joules": 1150.0, "peak_memory_bytes": 12 * GIB}
ADA_FIGURES = {"energy_per_epoch_joules": 520.0, "peak_memory_bytes": 40 * GIB}


def gpubench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the installed console script."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GPUBENCH_")}
    full_env.update(env or {})
    return subprocess.run(
        [str(GPUBENCH), *args], capture_output=True, text=True, env=full_env, timeout=60
    )


@pytest.fixture
def filled(collector: Any, make_run: Any) -> Any:
    """The collector with three B0 runs on a T4 and three on 2x RTX 6000 Ada."""
    collector.lab_token = collector.make_token("lab")
    with Client(collector.address, collector.lab_token) as client:
        for seconds in T4_SECONDS:
            client.submit_run(make_run(gpu_name=T4, epoch2_seconds=seconds, **T4_FIGURES))
        for seconds in ADA_SECONDS:
            client.submit_run(
                make_run(gpu_name=ADA, gpu_count=2, epoch2_seconds=seconds, **ADA_FIGURES)
            )
    return collector


@pytest.fixture
def invoke(filled: Any) -> Any:
    """Run a gpubench command in-process against `filled` with the lab token."""
    runner = CliRunner()

    def run(*args: str, token: str | None = None) -> Any:
        # Wide enough that each row is a line: tests/integration/test_80_columns.py
        # checks the default width.
        options = ["--collector", filled.address, "--token", token or filled.lab_token,
                   "--width", "250"]
        return runner.invoke(cli, [*options, *args], catch_exceptions=False)

    return run


# -- the console script: exit codes and one-line errors ------------------------------------


def test_unreachable_collector_exit_code() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = gpubench("--collector", f"127.0.0.1:{port}", "runs", "list")
    assert done.returncode == ExitCode.UNAVAILABLE
    # One message, wrapped at 80 columns.
    assert one_message(done.stderr).startswith(
        f"gpubench: error: cannot reach the collector at 127.0.0.1:{port} (Connection refused)")
    assert all(len(line) <= 80 for line in done.stderr.splitlines())
    assert done.stdout == ""


def one_message(stderr: str) -> str:
    """The one error message `stderr` holds, its wrapped lines joined: the lines after
    the first are indented, none is wider than 80 columns."""
    first, *rest = stderr.splitlines()
    assert all(line.startswith("  ") for line in rest), stderr
    assert max(len(line) for line in stderr.splitlines()) <= 80, stderr
    return " ".join([first, *(line.strip() for line in rest)])


def test_bad_token_and_not_found_exit_codes(filled: Any) -> None:
    env = {"GPUBENCH_COLLECTOR": filled.address}
    done = gpubench("runs", "list", env={**env, "GPUBENCH_TOKEN": "wrong"})
    assert done.returncode == ExitCode.AUTH
    assert one_message(done.stderr).startswith("gpubench: error: ")
    assert "token unknown or revoked" in one_message(done.stderr)

    done = gpubench("runs", "show", "no-such-run", env={**env, "GPUBENCH_TOKEN": filled.lab_token})
    assert done.returncode == ExitCode.NOT_FOUND
    assert "no-such-run" in one_message(done.stderr)


def test_compare_json_for_scripts(filled: Any) -> None:
    done = gpubench(
        "--collector", filled.address, "--token", filled.lab_token,
        "compare", "--model", "B0", "--baseline", T4, "--format", "json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["model"] == "B0" and document["baseline"] == "1x Tesla T4"
    assert document["precision"] == "float32" and document["image_size"] == 224
    fast, base = document["groups"]
    assert fast["gpu_config"] == f"2x {ADA}" and fast["gpu_count"] == 2
    assert fast["epoch2_median_s"] == pytest.approx(1.0)
    assert (fast["epoch2_min_s"], fast["epoch2_max_s"]) == pytest.approx((0.97, 1.04))
    assert fast["speedup"] == pytest.approx(17.0)
    assert base["is_baseline"] and base["speedup"] == pytest.approx(1.0)
    assert base["epoch2_median_s"] == pytest.approx(17.0)


# -- in-process: tables, formats, subcommands -----------------------------------------------


def test_compare_table_with_units_and_baseline(invoke: Any) -> None:
    result = invoke("compare", "--model", "b0", "--baseline", T4)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "B0 · tensorflow · float32 · 224 px" in out
    assert "1x Tesla T4  (baseline)" in out and f"2x {ADA}" in out
    assert "17.0 [16.4-17.6]" in out and "1.00 [0.970-1.04]" in out
    assert "17.0x" in out and "1.00x" in out
    assert "1024 (2x512)" in out  # the factory's batch for that card
    t4_share = 12 * GIB / CARDS[T4].memory_total_bytes
    ada_share = 40 * GIB / CARDS[ADA].memory_total_bytes
    assert f"12.0 GiB ({t4_share:.0%})" in out and f"40.0 GiB ({ada_share:.0%})" in out
    assert "1.15 kJ" in out and "520 J" in out  # energy per epoch
    assert f"{TRAIN_IMAGES / 1150:.2f}" in out and f"{TRAIN_IMAGES / 520:.2f}" in out  # img/J
    assert result.stderr == ""  # three runs each, tight spread: nothing to warn about


def test_compare_warnings_go_to_stderr(invoke: Any, filled: Any, make_run: Any) -> None:
    with Client(filled.address, filled.lab_token) as client:
        client.submit_run(make_run(gpu_name="NVIDIA H200", epoch2_seconds=5.0))
    result = invoke("compare", "--model", "B0", "--format", "csv")
    assert result.exit_code == 0
    frame = pd.read_csv(io.StringIO(result.stdout))
    assert list(frame.columns) == frames.COMPARE_COLUMNS
    assert frame["gpu_name"].tolist() == [ADA, "NVIDIA H200", T4]
    assert "warning: 1x NVIDIA H200: only 1 run" in result.stderr
    assert "warning" not in result.stdout


def test_compare_mixed_runs_refused(invoke: Any, filled: Any, make_run: Any) -> None:
    with Client(filled.address, filled.lab_token) as client:
        client.submit_run(make_run(gpu_name=T4, backend="torch"))
    result = invoke("compare", "--model", "B0")
    assert result.exit_code == ExitCode.FAILURE
    assert result.stderr.startswith("gpubench: error: ") and "--backend" in result.stderr
    assert invoke("compare", "--model", "B0", "--allow-mixed").exit_code == 0
    torch = invoke("compare", "--model", "B0", "--backend", "torch", "--format", "json")
    assert [g["runs"] for g in json.loads(torch.stdout)["groups"]] == [1]


def test_compare_pins_the_data_set_with_train_images(
    invoke: Any, filled: Any, make_run: Any
) -> None:
    # A smoke run: `gpubench-agent run --train-images 192`.
    smoke = make_run(gpu_name=T4, epoch2_seconds=1.9, config__image_count=240,
                     train_images_per_second=192 / (1.9 * 0.82),
                     config__train_images=192, config__validation_images=48)
    with Client(filled.address, filled.lab_token) as client:
        client.submit_run(smoke)
        frame = client.compare("B0", train_images=TRAIN_IMAGES)
        assert frame.attrs["train_images"] == TRAIN_IMAGES
        assert frame.set_index("gpu_config").loc["1x Tesla T4", "runs"] == len(T4_SECONDS)
    result = invoke("compare", "--model", "B0")
    assert result.exit_code == ExitCode.FAILURE
    assert f"train_images ({TRAIN_IMAGES}, 192; pin one with --train-images)" in result.stderr
    pinned = invoke("compare", "--model", "B0", "--train-images", str(TRAIN_IMAGES))
    assert pinned.exit_code == 0, pinned.stderr
    assert f"224 px · {TRAIN_IMAGES} training images" in pinned.stdout
    assert "17.0 [16.4-17.6]" in pinned.stdout  # the full runs only
    small = invoke("compare", "--model", "B0", "--train-images", "192", "--format", "json")
    document = json.loads(small.stdout)
    assert document["train_images"] == 192
    assert [(g["gpu_config"], g["runs"]) for g in document["groups"]] == [("1x Tesla T4", 1)]
    mixed = invoke("compare", "--model", "B0", "--allow-mixed", "--format", "json")
    assert json.loads(mixed.stdout)["train_images"] == 0


def test_compare_pins_how_the_network_was_computed_with_settings(
    invoke: Any, filled: Any, make_run: Any
) -> None:
    # Torch on the T4 through Keras's code path, and with the backend's own kernels (at
    # 12 s an epoch: within what a T4 is expected to reach with them, docs/protocol.md).
    kernels = make_run(gpu_name=T4, backend="torch", epoch2_seconds=12.0,
                       config__batched_augmentation=True, config__fused_batchnorm=True,
                       config__channels_first=True)
    with Client(filled.address, filled.lab_token) as client:
        client.submit_run(make_run(gpu_name=T4, backend="torch", epoch2_seconds=20.0))
        client.submit_run(kernels)
        frame = client.compare("B0", backend="torch", settings="kernels")
        assert frame.attrs["settings"] == "kernels"
        assert frame["epoch2_median_s"].tolist() == [12.0]
    result = invoke("compare", "--model", "B0", "--backend", "torch")
    assert result.exit_code == ExitCode.FAILURE
    assert "settings (keras, kernels; pin one with --settings)" in result.stderr
    pinned = invoke("compare", "--model", "B0", "--backend", "torch", "--settings", "kernels")
    assert pinned.exit_code == 0, pinned.stderr
    assert "B0 · torch · float32 · 224 px" in pinned.stdout and "settings kernels" in pinned.stdout
    keras = invoke("compare", "--model", "B0", "--backend", "torch", "--settings", "keras",
                   "--format", "json")
    document = json.loads(keras.stdout)
    assert document["settings"] == "keras"
    assert [g["epoch2_median_s"] for g in document["groups"]] == [20.0]
    mixed = invoke("compare", "--model", "B0", "--backend", "torch", "--allow-mixed",
                   "--format", "json")
    assert json.loads(mixed.stdout)["settings"] == "mixed"
    assert "kernels" in invoke("compare", "--help").stdout


def test_compare_chart(invoke: Any, tmp_path: Path) -> None:
    chart = tmp_path / "b0.png"
    result = invoke("compare", "--model", "B0", "--chart", str(chart))
    assert result.exit_code == 0, result.stderr
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_runs_list_show_delete(invoke: Any) -> None:
    listed = invoke("runs", "list", "--format", "json")
    assert listed.exit_code == 0
    runs = json.loads(listed.stdout)
    assert len(runs) == 6 and {r["submitter"] for r in runs} == {"lab"}
    assert sorted(r["epoch2_s"] for r in runs) == pytest.approx(sorted(T4_SECONDS + ADA_SECONDS))

    table = invoke("runs", "list", "--gpu", ADA.lower(), "--limit", "2")
    assert table.exit_code == 0
    assert table.stdout.count(f"2x {ADA}") == 2 and "Tesla T4" not in table.stdout

    csv = invoke("runs", "list", "--gpu-count", "1", "--format", "csv")
    assert pd.read_csv(io.StringIO(csv.stdout))["gpu_config"].tolist() == ["1x Tesla T4"] * 3

    run_id = runs[0]["run_id"]
    shown = invoke("runs", "show", run_id, "--format", "json")
    assert json.loads(shown.stdout)["run"]["run_id"] == run_id
    summary = invoke("runs", "show", run_id)
    assert f"run {run_id}" in summary.stdout and "epochs" in summary.stdout

    deleted = invoke("runs", "delete", run_id)
    assert deleted.exit_code == 0 and deleted.stdout == f"deleted run {run_id}\n"
    again = invoke("runs", "show", run_id)
    assert again.exit_code == ExitCode.NOT_FOUND
    assert again.stderr.startswith(f"gpubench: error: run_id {run_id}: no such run")


def test_runs_list_bad_time_is_a_usage_error(invoke: Any) -> None:
    result = invoke("runs", "list", "--since", "last tuesday")
    assert result.exit_code == ExitCode.USAGE
    assert "since: 'last tuesday' is not an ISO 8601" in result.stderr


def test_delete_someone_elses_run_is_refused(invoke: Any, filled: Any) -> None:
    run_id = json.loads(invoke("runs", "list", "--format", "json", "--limit", "1").stdout)[0][
        "run_id"
    ]
    result = invoke("runs", "delete", run_id, token=filled.make_token("mallory"))
    assert result.exit_code == ExitCode.AUTH and "deleting run" in result.stderr


# The factory's runs: Keras's own code path, the batch given.
KERAS_GIVEN = ("--settings", "keras", "--batch-rule", "given")


def test_leaderboard_formats(invoke: Any) -> None:
    table = invoke("leaderboard", "--model", "B0", *KERAS_GIVEN)
    assert table.exit_code == 0 and "B0 leaderboard" in table.stdout
    assert "ranked by the median epoch-2 time" in table.stdout
    board = pd.read_csv(
        io.StringIO(invoke("leaderboard", "--model", "B0", "--format", "csv",
                           *KERAS_GIVEN).stdout)
    )
    assert board["gpu_config"].tolist() == [f"2x {ADA}", "1x Tesla T4"]
    assert board["best_epoch2_s"].tolist() == pytest.approx([0.97, 16.4])
    limited = json.loads(
        invoke("leaderboard", "--model", "B0", "--limit", "1", "--format", "json",
               *KERAS_GIVEN).stdout
    )
    assert [e["rank"] for e in limited] == [1]


def test_export(invoke: Any, tmp_path: Path) -> None:
    out = tmp_path / "runs.parquet"
    result = invoke("export", "--out", str(out))
    assert result.exit_code == 0 and result.stderr == f"wrote 6 runs to {out}\n"
    frame = pd.read_parquet(out)
    assert len(frame) == 6 and list(frame.columns) == frames.FLAT_RUN_COLUMNS
    csv = tmp_path / "runs.csv"
    assert invoke("export", "--format", "csv", "--out", str(csv)).exit_code == 0
    assert len(pd.read_csv(csv)) == 6


def test_usage_errors_exit_2(invoke: Any) -> None:
    assert invoke("compare", "--model", "B9").exit_code == ExitCode.USAGE
    assert invoke("compare").exit_code == ExitCode.USAGE  # --model is required
    assert invoke("runs", "list", "--format", "xml").exit_code == ExitCode.USAGE


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    found = []
    for name, command in group.commands.items():
        found.append((f"{prefix}{name}", command))
        if isinstance(command, click.Group):
            found += _commands(command, f"{prefix}{name} ")
    return found


def test_every_flag_is_explained() -> None:
    commands = [("gpubench", cli), *_commands(cli)]
    for name, command in commands:
        assert command.help, f"{name} has no help"
        for param in command.params:
            if isinstance(param, click.Option) and param.name != "help":
                assert param.help, f"{name} {param.opts[0]} has no help"
    result = CliRunner().invoke(cli, ["compare", "--help"])
    assert result.exit_code == 0 and "--baseline-count" in result.stdout
    words = " ".join(result.stdout.split())
    assert "--train-images N" in words and "one dataset size" in words


def test_published_figures_stand_apart_and_flagged_runs_are_marked(
    invoke: Any, filled: Any, make_run: Any
) -> None:
    article = make_run(gpu_name=T4, epoch2_seconds=17.0, label="the article's Tesla T4",
                       config__weights="none", config__pipeline_mode="seed")
    article.published = True
    article.source = "the article, as published"
    fabricated = make_run(gpu_name=T4, epoch2_seconds=0.01)  # 200,000 img/s on a T4
    with Client(filled.address, filled.admin_token) as admin:
        admin.submit_run(article)
        admin.submit_run(fabricated)
    table = invoke("compare", "--model", "B0")
    assert table.exit_code == 0, table.stderr
    measured, _, published = table.stdout.partition("published figures: transcribed")
    assert "2x " + ADA in measured and "1x Tesla T4" in measured
    assert "not like for like with the runs above" in " ".join(published.split())
    assert "weights none" in published and "the article, as published" in published
    document = json.loads(invoke("compare", "--model", "B0", "--format", "json").stdout)
    [entry] = document["published"]
    assert (entry["gpu_config"], entry["source"]) == ("1x Tesla T4", "the article, as published")
    assert document["groups"][1]["runs"] == len(T4_SECONDS)  # the fabricated run left out
    flagged = invoke("compare", "--model", "B0", "--include-flagged")
    assert "(1 flagged)" in flagged.stdout and "flagged as implausible" in flagged.stderr
    listed = invoke("runs", "list")
    mine, _, theirs = listed.stdout.partition("published figures (transcribed")
    assert "measured runs" in mine and "ok (flagged)" in mine
    # Run ids as a unique prefix (runs show takes it).
    assert article.run_id[:8] in theirs and article.run_id[:8] not in mine
    shown = invoke("runs", "show", fabricated.run_id)
    assert "flagged because" in shown.stdout and "can compute" in shown.stdout


# -- connection options after the subcommand -------------------------------------------------


@pytest.mark.parametrize("command", [
    ("compare", "--model", "B0", *KERAS_GIVEN),
    ("runs", "list"),
    ("runs", "show", "RUN_ID"),
    ("leaderboard", "--model", "B0", *KERAS_GIVEN),
    ("export", "--format", "csv", "--out", "OUT"),
    ("runs", "delete", "RUN_ID"),
])
def test_connection_options_after_the_subcommand(
    filled: Any, tmp_path: Path, command: tuple[str, ...]
) -> None:
    runner = CliRunner()
    run_id = Client(filled.address, filled.lab_token).list_runs(limit=1)["run_id"][0]
    args = [str(tmp_path / "runs.csv") if a == "OUT" else run_id if a == "RUN_ID" else a
            for a in command]
    env = {"GPUBENCH_COLLECTOR": "", "GPUBENCH_TOKEN": ""}
    # The group's options are left out: those after the command are the ones that count.
    wrong = runner.invoke(cli, [*args, "--collector", filled.address, "--token", "wrong",
                                "--timeout", "5"], env=env)
    assert wrong.exit_code == ExitCode.AUTH, wrong.output
    # Given after the command, they replace those given before it.
    done = runner.invoke(cli, ["--collector", "127.0.0.1:1", "--token", "wrong", *args,
                               "--collector", filled.address, "--token", filled.lab_token],
                         env=env)
    assert done.exit_code == 0, done.output
    words = [w for w in command[:2] if not w.startswith("-")]
    assert "--collector HOST:PORT" in runner.invoke(cli, [*words, "--help"]).output


def test_runs_show_takes_the_start_of_a_run_id(invoke: Any) -> None:
    run_ids = [r["run_id"] for r in json.loads(invoke("runs", "list", "--format", "json").stdout)]
    shown = invoke("runs", "show", run_ids[0][:8], "--format", "json")
    assert shown.exit_code == 0 and json.loads(shown.stdout)["run"]["run_id"] == run_ids[0]
    assert invoke("runs", "show", "").exit_code == ExitCode.USAGE  # every id starts with ""
    missing = invoke("runs", "show", "zzzzzzzz")
    assert missing.exit_code == ExitCode.NOT_FOUND and "no stored run id starts" in missing.stderr
