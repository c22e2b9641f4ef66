"""`gpubench estimate`, `fit` and `plot`, and `--price`/`--prices` on `compare`: the
answers people came for, from stored runs.

Registers itself with the `gpubench` group when gpubench.cli imports it. Output is
plain text of at most 80 columns; measured runs answer, published figures (the
article's, transcribed) are shown in lines of their own and never mixed in.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import asdict
from typing import Any

import click

from gpubench import estimate as estimating
from gpubench import record, stored_runs, tables
from gpubench.cli import MODEL, _client, cli

WIDTH = 80
PUBLISHED_HEADING = "Published figures (transcribed from the article, not measured by gpubench)"


def _echo_wrapped(text: str, indent: str = "") -> None:
    """`text` wrapped to WIDTH columns, every line indented by `indent`."""
    click.echo(textwrap.fill(text, WIDTH, initial_indent=indent, subsequent_indent=indent))


def _runs(ctx: click.Context, model: str, gpu: str | None, include_outliers: bool,
          ) -> tuple[list[Any], list[Any]]:
    """The usable (measured, published) runs of `model` on GPUs matching `gpu`."""
    stored = _client(ctx).iter_runs(model=model, gpu=gpu)
    matching = (s for s in stored if gpu is None or stored_runs.matches_gpu(s.run, gpu))
    return stored_runs.split(matching, include_outliers=include_outliers)


def _gpu_option(help_text: str) -> Any:
    return click.option("--gpu", metavar="NAME", help=help_text)


INCLUDE_OUTLIERS = click.option("--include-outliers", is_flag=True,
                                help="Keep runs the collector marked as outliers of their "
                                "GPU configuration.")
FORMAT = click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
                      show_default=True, help="table for people; json (on stdout) for scripts.")


# -- estimate ---------------------------------------------------------------------------


def _estimate_lines(group: estimating.GroupEstimate) -> None:
    runs = group.runs
    count = f"{len(runs)} run" + ("s" if len(runs) > 1 else "")
    click.echo(f"  {group.setup.gpu_config}: {estimating.format_range(group.seconds)} "
               f"({count})")
    epoch2 = sorted(r.epoch2_s for r in runs)
    epoch1 = sorted(r.epoch1_s for r in runs if r.epoch1_s > 0)
    images = sorted({r.run_images for r in runs})
    basis = "epoch 2 " + _seconds_range(epoch2)
    if epoch1:
        basis += ", epoch 1 " + _seconds_range(epoch1)
    else:
        basis += " (epoch 1 not recorded: no start-up added)"
    basis += (f", at {', '.join(f'{n:,}' for n in images)} training images, batch "
              f"{', '.join(str(b) for b in group.batches)}")
    _echo_wrapped(f"from {basis}", "    ")
    _echo_wrapped(f"settings: {group.setup.describe()}", "    ")


def _seconds_range(values: list[float]) -> str:
    low, high = values[0], values[-1]
    if low == high:
        return f"{tables.three_digits(low)} s"
    return f"{tables.three_digits(low)}-{tables.three_digits(high)} s"


@cli.command()
@click.option("--model", type=MODEL, required=True, help="The network: B0, B3 or B7.")
@_gpu_option('Only GPUs whose name contains this, e.g. "Tesla T4" or "H200" '
             "(default: every GPU with runs).")
@click.option("--epochs", type=click.IntRange(min=1), required=True,
              help="How many epochs the training runs, e.g. 400.")
@click.option("--images", type=click.IntRange(min=1), default=record.STANDARD_TRAIN_IMAGES,
              show_default=True, help="Training images an epoch (default: the benchmark's "
              "training set).")
@INCLUDE_OUTLIERS
@FORMAT
@click.pass_context
def estimate(ctx: click.Context, model: str, gpu: str | None, epochs: int, images: int,
             include_outliers: bool, fmt: str) -> None:
    """How long training `--epochs` epochs of `--images` images takes on each GPU
    configuration, scaled from the stored runs' epoch times.

    Assumes an epoch's time (training and validation) is linear in its images and
    epoch 1's extra start-up (epoch 1 minus epoch 2) is paid once; every later epoch
    takes what epoch 2 did. Runs measured differently (backend, precision, settings,
    batch rule, ...) are shown apart, with the range over their runs (min, median,
    max); published figures are shown on lines of their own."""
    model = model.upper()
    measured, published = _runs(ctx, model, gpu, include_outliers)
    found = estimating.estimate(measured, epochs, images)
    found_published = estimating.estimate(published, epochs, images)
    if fmt == "json":
        click.echo(json.dumps({
            "model": model, "epochs": epochs, "images": images,
            "measured": [_group_document(g) for g in found],
            "published": [_group_document(g) for g in found_published],
        }, indent=2))
        return
    where = f" on {gpu}" if gpu else ""
    click.echo(f"{model}{where}: {epochs:,} epochs of {images:,} training images")
    click.echo("")
    click.echo("Measured runs")
    if not found:
        _echo_wrapped(f"none stored of {model}{where} (gpubench runs list --model {model} "
                      "lists what there is)", "  ")
    for group in found:
        _estimate_lines(group)
    if found_published:
        click.echo("")
        click.echo(PUBLISHED_HEADING)
        for group in found_published:
            _estimate_lines(group)
    click.echo("")
    _echo_wrapped("Assumes an epoch's time (training and validation) linear in its images, "
                  "epoch 1's extra start-up (epoch 1 minus epoch 2) paid once, and every "
                  "later epoch as long as epoch 2 (no checkpoints, no early stopping).")


def _group_document(group: estimating.GroupEstimate) -> dict[str, Any]:
    return {
        "setup": asdict(group.setup),
        "runs": len(group.runs),
        "seconds_min": group.min_s,
        "seconds_median": group.median_s,
        "seconds_max": group.max_s,
        "per_run": [asdict(r) for r in group.runs],
    }
