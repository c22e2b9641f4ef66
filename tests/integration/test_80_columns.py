"""Every table the `gpubench` CLI and the agent's summary print fits 80 columns: rendered
at width 80 by rich, no cell is cut ("…") and no line is longer than 80. Against a real
collector holding the reference runs (docs/results/runs/, published ones included) and
runs of long GPU names, several GPUs and mixed precision."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from factories import import_reference_runs

from gpubench import record
from gpubench.agent.summary import summary_table
from gpubench.cli import cli
from gpubench.client import Client

ADA = "NVIDIA RTX 6000 Ada Generation"
WIDTH = 80


def assert_fits(text: str, what: str) -> None:
    assert "…" not in text, f"{what}: a cell is cut\n{text}"
    long = [line for line in text.splitlines() if len(line) > WIDTH]
    assert not long, f"{what}: {len(long)} line(s) over {WIDTH} columns\n{text}"


@pytest.fixture
def references(collector_factory: Any, make_run: Any, tmp_path: Path) -> Any:
    """A collector on a database holding the reference runs, with runs of 2x RTX 6000 Ada
    (float32 and mixed_bfloat16, one of them on other data) beside them."""
    db = tmp_path / "references.duckdb"
    import_reference_runs(db)
    running = collector_factory(db_path=db)
    running.lab_token = running.make_token("a-rather-long-submitter-name")
    with Client(running.address, running.lab_token) as client:
        for seconds in (1.0, 1.04, 0.97):
            client.submit_run(make_run(gpu_name=ADA, gpu_count=2, epoch2_seconds=seconds))
        client.submit_run(make_run(gpu_name=ADA, gpu_count=2, precision="mixed_bfloat16"))
        client.submit_run(make_run(gpu_name="Tesla T4", model="B7"))
        client.submit_run(make_run(gpu_name=ADA, gpu_count=2, model="B7"))
    return running


def test_every_query_table_fits_80_columns(references: Any) -> None:
    runner = CliRunner()
    base = ["--collector", references.address, "--token", references.lab_token]
    with Client(references.address, references.lab_token) as client:
        ids = client.list_runs(limit=100)
    measured = ids[~ids["published"]]["run_id"].iloc[0]
    published = ids[ids["published"]]["run_id"].iloc[0]
    commands = [
        ["compare", "--model", "B0", "--allow-mixed"],
        ["compare", "--model", "B7", "--baseline", "Tesla T4", "--backend", "tensorflow"],
        ["compare", "--model", "B0", "--precision", "float32", "--backend", "tensorflow"],
        ["runs", "list"],
        ["runs", "show", measured],
        ["runs", "show", published],
        ["leaderboard", "--model", "B0"],
        ["leaderboard", "--model", "B0", "--settings", "keras", "--batch-rule", "given"],
    ]
    for command in commands:
        done = runner.invoke(cli, [*base, *command], env={"COLUMNS": str(WIDTH)})
        assert done.exit_code == 0, done.output
        assert done.stdout.strip(), command
        assert_fits(done.stdout, " ".join(command))


def test_unlike_runs_are_marked_in_the_table(references: Any) -> None:
    done = CliRunner().invoke(cli, ["--collector", references.address, "--token",
                                    references.lab_token, "compare", "--model", "B0",
                                    "--allow-mixed"], env={"COLUMNS": str(WIDTH)})
    text = done.stdout
    title = text.splitlines()[0]
    # The title says what the runs share; "mixed" there would read as mixed precision.
    assert "mixed" not in title and "UNLIKE RUNS" in title
    assert "* unlike runs shown together (--allow-mixed): they differ in backend" in " ".join(
        text.split())
    compared = text.split("published figures")[0]
    rows = [line for line in compared.splitlines() if line.startswith(("1x", "2x"))]
    # A speedup only for the configurations that ran as the baseline did (the baseline's
    # own 1.00x); "-*" for the others, whose ratio would time different work.
    assert [line.split()[-1] for line in rows] == ["-*", "1.00x"], compared
    assert "no speedup unless a configuration ran as the baseline did" in " ".join(
        text.split())
    like = CliRunner().invoke(cli, ["--collector", references.address, "--token",
                                    references.lab_token, "compare", "--model", "B7",
                                    "--baseline", "Tesla T4", "--backend", "tensorflow"],
                              env={"COLUMNS": str(WIDTH)})
    assert "UNLIKE" not in like.stdout and "x*" not in like.stdout


def test_the_agents_summary_fits_80_columns(make_run: Any) -> None:
    from rich.console import Console

    runs = [make_run(gpu_name=ADA, gpu_count=2, model=model) for model in ("B0", "B3", "B7")]
    runs[2].result.status = record.RunStatus.RUN_STATUS_OUT_OF_MEMORY
    runs[0].result.largest_batch_per_gpu = 1024
    console = Console(width=WIDTH, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(summary_table(runs))
    assert_fits(console.export_text(), "summary")
    json.dumps([record.to_dict(r) for r in runs])  # the runs are complete records


def test_80_columns_when_stdout_is_no_terminal_and_width_overrides(references: Any) -> None:
    runner = CliRunner()
    base = ["--collector", references.address, "--token", references.lab_token]
    # No terminal and no $COLUMNS (a pipe, `less`, `docker compose exec -T`): 80 columns.
    plain = runner.invoke(cli, [*base, "runs", "list"], env={"COLUMNS": None})
    assert plain.exit_code == 0, plain.output
    assert_fits(plain.stdout, "runs list without a terminal")
    # --width, before or after the command, lays the same table out wider.
    for args in ([*base, "--width", "160", "runs", "list"],
                 [*base, "runs", "list", "--width", "160"]):
        wide = runner.invoke(cli, args, env={"COLUMNS": None})
        lines = wide.stdout.splitlines()
        assert max(map(len, lines)) > WIDTH and all(len(line) <= 160 for line in lines)
    # A long error wraps at the width too.
    unknown = runner.invoke(cli, [*base, "runs", "show", "ffffffff" * 4], env={"COLUMNS": None})
    assert unknown.exit_code != 0 and len(unknown.stderr.splitlines()) > 1
    assert all(len(line) <= WIDTH for line in unknown.stderr.splitlines())


def test_the_answers_fit_80_columns(references: Any) -> None:
    runner = CliRunner()
    base = ["--collector", references.address, "--token", references.lab_token]
    for command in (["fit", "--model", "B7", "--memory-limit", "16GiB"],
                    ["fit", "--model", "B0", "--card", "Tesla T4"],
                    ["estimate", "--model", "B7", "--epochs", "400"],
                    ["compare", "--model", "B7", "--backend", "torch", "--precision", "float32",
                     "--price", "NVIDIA H200=32000"]):
        done = runner.invoke(cli, [*base, *command], env={"COLUMNS": None})
        assert done.exit_code == 0, done.output
        assert_fits(done.stdout, " ".join(command))


def _custom_run(make_run: Any, model: str, **fields: Any) -> Any:
    """A run of a keras.applications architecture (its own fingerprint)."""
    return make_run(gpu_name=ADA, gpu_count=2, model=model, batch_per_gpu=128,
                    epoch2_seconds=1.0, peak_memory_bytes=8 << 30,
                    config__model_fingerprint=f"{len(model):02x}" * 32,
                    config__input_spec="photos 224x224x3", **fields)


def test_runs_of_models_of_one_family_keep_their_names_and_ids(references: Any,
                                                              make_run: Any) -> None:
    """Before: run ids split over two lines and MobileNetV2 and MobileNetV3Small both
    shown as "Mobile…"."""
    with Client(references.address, references.lab_token) as client:
        for model in ("MobileNetV2", "MobileNetV3Small"):
            client.submit_run(_custom_run(make_run, model))
    done = CliRunner().invoke(cli, ["--collector", references.address, "--token",
                                    references.lab_token, "runs", "list"],
                              env={"COLUMNS": str(WIDTH)})
    assert done.exit_code == 0, done.output
    assert_fits(done.stdout, "runs list")
    assert "measured runs of MobileNetV2" in done.stdout
    assert "measured runs of MobileNetV3Small" in done.stdout
    with Client(references.address, references.lab_token) as client:
        ids = client.list_runs(limit=100)["short_id"]
    lines = done.stdout.splitlines()
    assert all(any(line.startswith(str(short)) for line in lines) for short in ids)


def test_the_agents_spool_listing_fits_80_columns(tmp_path: Path, make_run: Any) -> None:
    import subprocess
    import sys

    from gpubench.agent.spool import Spool

    spool = Spool(tmp_path / "spool")
    runs = [_custom_run(make_run, "MobileNetV2"),
            _custom_run(make_run, "MobileNetV3Small", status="interrupted"),
            make_run(gpu_name=ADA, gpu_count=2)]
    for run in runs:
        spool.write(run)
    done = subprocess.run([sys.executable, "-m", "gpubench.agent.cli", "status", "--spool",
                           str(spool.root)], capture_output=True, text=True, timeout=120,
                          env={"COLUMNS": str(WIDTH), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    text = done.stdout
    long = [line for line in text.splitlines() if len(line) > WIDTH and " " in line.strip()]
    assert "…" not in text and not long, text
    for run in runs:
        assert any(line.split()[1:2] == [run.run_id[:8]] and run.config.model in line
                   for line in text.splitlines()), text


def test_a_published_run_shows_no_accuracy_it_never_gave(references: Any) -> None:
    """The article's T4 figures are transcribed epoch times: before, `runs show` printed
    an accuracy of 0.000 for each epoch, a figure nobody published."""
    with Client(references.address, references.lab_token) as client:
        ids = client.list_runs(limit=100)
    t4 = ids[ids["published"] & (ids["gpu_name"] == "Tesla T4")]["run_id"].iloc[0]
    done = CliRunner().invoke(cli, ["--collector", references.address, "--token",
                                    references.lab_token, "runs", "show", t4],
                              env={"COLUMNS": str(WIDTH)})
    assert done.exit_code == 0, done.output
    epochs = done.stdout.split("epochs", 1)[1].split("\n\n")[0]
    rows = [line.split() for line in epochs.splitlines() if line.strip()[:1].isdigit()]
    assert rows and all(row[-2:] == ["-", "-"] for row in rows), epochs
    assert "0.000" not in done.stdout
