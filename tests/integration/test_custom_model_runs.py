"""A model of the user's own through the whole pipeline: `gpubench-agent run` of a tiny
.keras file (the real workload, torch on the CPU) to a real collector on port 0, then
back through `gpubench compare` and `fit` by its name and by its fingerprint; a model
gpubench cannot feed refused with exit 2 and nothing spooled; a language model's speed
in tokens a second through to a table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from gpubench import frames, models, record, tables
from gpubench.cli import cli
from gpubench.client import Client
from gpubench.v1 import collector_pb2

pytestmark = pytest.mark.slow

TINY = Path(__file__).resolve().parents[1] / "workload" / "tiny_models.py"
AGENT = [sys.executable, "-m", "gpubench.agent.cli"]

SAVE = """
import os, sys
os.environ["KERAS_BACKEND"] = "torch"
sys.path.insert(0, sys.argv[1])
import tiny_models
getattr(tiny_models, sys.argv[2])().save(sys.argv[3])
"""


def saved(function: str, path: Path) -> Path:
    """tiny_models.`function`() saved as a .keras file at `path` (in a process of its own)."""
    done = subprocess.run([sys.executable, "-c", SAVE, str(TINY.parent), function, str(path)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return path


def agent(tmp_path: Path, *args: str, token: str = "") -> subprocess.CompletedProcess:
    """`gpubench-agent run ARGS`, its token (if any) in the environment, never in argv."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUBENCH_") or k in ("GPUBENCH_STATE", "GPUBENCH_CACHE")}
    env.update(GPUBENCH_SPOOL=str(tmp_path / "spool"), COLUMNS="200")
    if token:
        env["GPUBENCH_TOKEN"] = token
    return subprocess.run([*AGENT, "run", "--backend", "torch", "--gpus", "0",
                           "--limit-images", "48", *args], env=env, capture_output=True,
                          text=True, timeout=900, check=False)


def test_a_keras_file_runs_to_the_collector_and_compares_by_name_and_fingerprint(
        tmp_path: Path, collector) -> None:
    model = saved("cnn", tmp_path / "mine.keras")
    token = collector.make_token("lab")
    done = agent(tmp_path, "--models", str(model), "--batch", "8",
                 "--collector", collector.address, token=token)
    assert done.returncode == 0, done.stderr[-3000:]
    [sent] = list((tmp_path / "spool" / "sent").iterdir())
    with Client(collector.address, collector.admin_token) as client:
        run = client.get_run(sent.stem).run
    config = run.config
    assert config.model == "tiny_cnn" and config.unit == models.IMAGES
    assert config.input_spec == "photos 32x32x3" and config.image_size == 32
    assert len(config.model_fingerprint) == 64 and config.parameter_count > 0
    # The architecture stays on the host: no layer of it is in the record.
    assert b"Conv2D" not in run.SerializeToString()

    runner = CliRunner()
    options = ["--collector", collector.address, "--token", token, "--width", "200"]
    for named in ("tiny_cnn", config.model_fingerprint[:12]):
        compared = runner.invoke(cli, [*options, "compare", "--model", named, "--format", "json"],
                                 catch_exceptions=False)
        assert compared.exit_code == 0, compared.output
        document = json.loads(compared.output)
        assert document["model"] == "tiny_cnn", document
        fit = runner.invoke(cli, [*options, "fit", "--model", named, "--memory-limit", "8GiB"],
                            catch_exceptions=False)
        assert fit.exit_code == 0, fit.output
        assert "8" in fit.output
    table = runner.invoke(cli, [*options, "compare", "--model", "tiny_cnn"],
                          catch_exceptions=False)
    assert table.exit_code == 0 and "img/s" in table.output, table.output
    unknown = runner.invoke(cli, [*options, "compare", "--model", "0123456789ab"])
    assert unknown.exit_code != 0 and "no stored run" in unknown.output


def test_a_model_it_cannot_feed_is_refused_with_exit_2_and_nothing_spooled(
        tmp_path: Path) -> None:
    model = saved("two_inputs", tmp_path / "two.keras")
    done = agent(tmp_path, "--models", str(model), "--batch", "8", "--offline")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "one input and one output" in done.stderr
    spool = tmp_path / "spool"  # the workload's output log only: no run to push
    assert [p.relative_to(spool).parts[0] for p in spool.rglob("*") if p.is_file()] in (
        [], ["logs"])


def test_a_language_models_tokens_a_second_reach_a_table(tmp_path: Path) -> None:
    done = agent(tmp_path, "--models", f"{TINY}:language_model", "--batch", "4", "--offline",
                 "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    [run] = [record.from_dict(data) for data in json.loads(done.stdout)]
    assert run.config.unit == models.TOKENS and run.result.train_images_per_second > 0
    frame = frames.runs_frame([collector_pb2.StoredRun(run=run)])
    assert frame.loc[0, "unit"] == models.TOKENS
    console = Console(width=120, record=True)
    console.print(tables.runs_table(frame))
    text = console.export_text()
    assert "tok/s" in text and "img/s" not in text and "training tokens a second" in text
