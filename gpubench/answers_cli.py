"""`gpubench estimate`, `fit` and `plot`: the answers people came for, from stored runs.

gpubench.cli adds COMMANDS to the `gpubench` group. The answers and their sentences are
gpubench.answers' documents (the results site shows the same); here they are printed as
plain text of the output's width (80 columns where no terminal says otherwise), or as
their JSON. Measured runs answer, published figures (the article's, transcribed) are
shown in lines of their own and never mixed in.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import click

from gpubench import answers, models, plot_data, record
from gpubench import fit as fitting
from gpubench.cli_shared import MODEL, MODEL_HELP, output_width, query_client
from gpubench.cli_vocabulary import (
    MEMORY_SIZE,
    TRAIN_IMAGES,
    card_memory,
    gpu_option,
    old_spelling,
    say_renamed,
)
from gpubench.usage import example


def _echo_wrapped(text: str, indent: str = "") -> None:
    """`text` wrapped to the output's width, every line indented by `indent`."""
    click.echo(textwrap.fill(text, output_width(), initial_indent=indent,
                             subsequent_indent=indent, break_on_hyphens=False))


def _runs(ctx: click.Context, model: str, gpu: str | None, include_outliers: bool
          ) -> answers.Runs:
    """The usable runs of `model` on the GPU `gpu` names (answers.read_runs); a `gpu` that
    names no GPU with runs of the model is NotFound, naming the closest."""
    runs: answers.Runs = query_client(ctx).usable_runs(model, gpu, include_outliers)
    return runs


INCLUDE_OUTLIERS = click.option("--include-outliers", is_flag=True,
                                help="Keep runs the collector marked as outliers of their "
                                "GPU configuration.")
FORMAT = click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
                      show_default=True, help="table for people; json (on stdout) for scripts.")


# -- estimate ---------------------------------------------------------------------------


def _estimate_lines(group: dict[str, Any]) -> None:
    _echo_wrapped(group["answer"], "  ")
    _echo_wrapped(group["basis"], "    ")
    _echo_wrapped(group["settings"], "    ")


@click.command(epilog=example('gpubench estimate --model B7 --epochs 400 --gpu "Tesla T4"'))
@click.option("--model", type=MODEL, required=True, help=MODEL_HELP)
@gpu_option("Only this GPU (default: every GPU with runs).")
@click.option("--epochs", type=click.IntRange(min=1), required=True,
              help="How many epochs the training runs, e.g. 400.")
@click.option("--train-images", "images", metavar="N", type=click.IntRange(min=1),
              default=record.STANDARD_TRAIN_IMAGES, show_default=True,
              help=f"Train on {TRAIN_IMAGES}; the benchmark's training set by default.")
@old_spelling("--images", "old_images", "--train-images", type=click.IntRange(min=1))
@INCLUDE_OUTLIERS
@FORMAT
@click.pass_context
def estimate(ctx: click.Context, model: str, gpu: str | None, epochs: int, images: int,
             old_images: int | None, include_outliers: bool, fmt: str) -> None:
    """How long training `--epochs` epochs of `--train-images` images takes on each GPU
    configuration, scaled from the stored runs' epoch times.

    Assumes an epoch's time (training and validation) is linear in its images and
    epoch 1's extra start-up (epoch 1 minus epoch 2) is paid once; every later epoch
    takes what epoch 2 did. Runs measured differently (backend, precision, settings,
    batch rule, ...) are shown apart, with the range over their runs (min, median,
    max); published figures are shown on lines of their own."""
    if old_images is not None:
        images = old_images
        say_renamed("gpubench", "--images", "--train-images")
    document = query_client(ctx).estimate_document(model, epochs=epochs, images=images,
                                                   gpu=gpu, include_outliers=include_outliers)
    if fmt == "json":
        click.echo(json.dumps(document, indent=2))
        return
    click.echo(document["question"])
    click.echo("")
    click.echo("Measured runs")
    if not document["measured"]:
        _echo_wrapped(document["none"], "  ")
    for group in document["measured"]:
        _estimate_lines(group)
    if document["published"]:
        click.echo("")
        click.echo(answers.PUBLISHED_HEADING)
        for group in document["published"]:
            _estimate_lines(group)
    click.echo("")
    _echo_wrapped(document["assumes"])


# -- fit --------------------------------------------------------------------------------


def _answer_lines(found: dict[str, Any]) -> None:
    for label, result in found.items():
        _echo_wrapped(f"{label}: {result['verdict']}", "  ")
        _echo_wrapped(result["how_sure"], "    ")
        for run_fit in result["runs"]:
            _echo_wrapped(run_fit["answer"], "    ")
            if run_fit["basis_text"]:
                _echo_wrapped(run_fit["basis_text"], "      ")
            _echo_wrapped(run_fit["settings"], "      ")
        if result["left_aside"]:
            _echo_wrapped(f"({result['left_aside']} more run(s) on a less direct basis left "
                          "aside)", "    ")


@click.command(epilog=example('gpubench fit --model B7 --memory-limit 16GiB'), help=(
    "Whether a GPU of --memory-limit (or the card --card names) trains the model, and at "
    "about what batch.\n\n"
    "From the stored runs: a run searched at or near that memory (its card's, or its "
    "--memory-limit) answers directly; otherwise the line of peak memory against batch "
    "through each run's search trials predicts the largest batch that leaves "
    f"{fitting.HEADROOM:.0%} of the card free, as the agent's search would. Says which runs "
    "the answer rests on and how sure it is; published figures are answered apart."))
@click.option("--model", type=MODEL, required=True, help=MODEL_HELP)
@click.option("--memory-limit", "memory_bytes", metavar="SIZE", callback=card_memory,
              help=f"Whether a GPU of this memory trains the model: {MEMORY_SIZE}.")
@old_spelling("--memory", "old_memory", "--memory-limit", metavar="SIZE", callback=card_memory)
@click.option("--card", metavar="NAME",
              help='Or a card by its name, e.g. "Tesla T4": its memory as the stored runs '
              "on one recorded it.")
@gpu_option("Only runs on this GPU (default: every GPU).")
@INCLUDE_OUTLIERS
@FORMAT
@click.pass_context
def fit(ctx: click.Context, model: str, memory_bytes: int | None, old_memory: int | None,
        card: str | None, gpu: str | None, include_outliers: bool, fmt: str) -> None:
    """`gpubench fit`: the largest batch a card of `memory_bytes` holds (help above)."""
    if old_memory is not None:
        if memory_bytes is not None:
            raise click.UsageError("--memory-limit and --memory: give --memory-limit "
                                   "(--memory is its old spelling)")
        memory_bytes = old_memory
        say_renamed("gpubench", "--memory", "--memory-limit")
    if (memory_bytes is None) == (card is None):
        raise click.UsageError("give the GPU's memory (--memory-limit 16GiB) or its name "
                               '(--card "Tesla T4"), one of them')
    document = query_client(ctx).fit_document(model, memory=memory_bytes, card=card, gpu=gpu,
                                              include_outliers=include_outliers)
    if fmt == "json":
        click.echo(json.dumps(document, indent=2))
        return
    click.echo(document["question"])
    click.echo("")
    click.echo("Measured runs")
    if not document["measured"]:
        _echo_wrapped(document["none"], "  ")
    _answer_lines(document["measured"])
    if document["published"]:
        click.echo("")
        click.echo(answers.PUBLISHED_HEADING)
        _answer_lines(document["published"])


# -- plot -------------------------------------------------------------------------------


@click.command(epilog=example('gpubench plot --model B7 --image-format svg --out charts'))
@click.option("--model", type=MODEL, required=True, help=MODEL_HELP)
@gpu_option("Only this GPU (default: every GPU with runs).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=".",
              show_default=True, help="The folder to write the charts into (made if "
              "missing).")
@click.option("--image-format", "formats", type=click.Choice(["png", "svg", "pdf"]),
              multiple=True, help="Image format (repeat for several; default: png).")
@click.option("--metric", "metrics", type=click.Choice([m.name for m in plot_data.METRICS]),
              multiple=True, help="Draw only this chart (repeat for several; default: all "
              "four).")
@INCLUDE_OUTLIERS
@click.pass_context
def plot(ctx: click.Context, model: str, gpu: str | None, out_dir: str,
         formats: tuple[str, ...], metrics: tuple[str, ...], include_outliers: bool) -> None:
    """Draw charts of the stored runs of one model: epoch-2 time, throughput, peak
    memory against the card's capacity and energy per epoch, one bar per GPU
    configuration and settings at the median of its runs, the runs' spread (min-max)
    as error bars. Published figures are drawn apart, hatched; a figure the
    article did not publish is left out. Writes MODEL-METRIC.FORMAT files into --out
    (e.g. b7-epoch-time.png) and names each on stderr."""
    from pathlib import Path

    from gpubench import charts

    runs = _runs(ctx, model, gpu, include_outliers)
    measured, published = runs.measured, runs.published
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    units = {models.unit_of(run.config.model, run.config.unit) for run in measured + published}
    unit = units.pop() if len(units) == 1 else models.IMAGES
    chosen = [plot_data.in_unit(m, unit) for m in plot_data.METRICS
              if not metrics or m.name in metrics]
    for metric in chosen:
        footnotes = []
        absent = plot_data.missing(published, metric)
        if absent:
            footnotes.append(f"not published for {', '.join(sorted(set(absent)))}: left out")
        absent = plot_data.missing(measured, metric)
        if absent:
            footnotes.append(f"not measured for {', '.join(sorted(set(absent)))}: left out")
        for setup, left_out in runs.outliers.items():
            footnotes.append(f"{setup.gpu_config}, {setup.settings}, batch rule "
                             f"{setup.batch_rule}: {len(left_out)} outlier run(s) left out "
                             "(--include-outliers keeps them)")
        for image_format in formats or ("png",):
            target = folder / f"{model.lower()}-{metric.name}.{image_format}"
            charts.metric_chart(model, metric, plot_data.bars(measured, metric, published=False),
                                plot_data.bars(published, metric, published=True), target,
                                footnotes=footnotes)
            click.echo(f"wrote {target}", err=True)


# The commands gpubench.cli adds to its group.
COMMANDS = (estimate, fit, plot)
