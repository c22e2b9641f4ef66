"""`gpubench estimate`, `fit` and `plot`: the answers people came for, from stored runs.

gpubench.cli adds COMMANDS to the `gpubench` group. Output is
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
from gpubench import fit as fitting
from gpubench import frames, plot_data, record, sizes, stored_runs, tables
from gpubench.cli_shared import MODEL, query_client

WIDTH = 80
PUBLISHED_HEADING = "Published figures (transcribed from the article, not measured by gpubench)"


def _echo_wrapped(text: str, indent: str = "") -> None:
    """`text` wrapped to WIDTH columns, every line indented by `indent`."""
    click.echo(textwrap.fill(text, WIDTH, initial_indent=indent, subsequent_indent=indent,
                             break_on_hyphens=False))


def _runs(ctx: click.Context, model: str, gpu: str | None, include_outliers: bool,
          ) -> tuple[list[Any], list[Any]]:
    """The usable (measured, published) runs of `model` on GPUs matching `gpu`; the
    outliers left out are kept in ctx.meta["outliers"] for a note."""
    stored = query_client(ctx).iter_runs(model=model, gpu=gpu)
    matching = [s for s in stored if gpu is None or stored_runs.matches_gpu(s.run, gpu)]
    left_out = [] if include_outliers else stored_runs.outliers(matching)
    ctx.meta["outliers"] = stored_runs.grouped(left_out)
    return stored_runs.split(matching, include_outliers=include_outliers)


def _outlier_note(ctx: click.Context, setup: stored_runs.Setup) -> str:
    """'; 2 outliers left out (--include-outliers keeps them)', or ''."""
    count = len(ctx.meta.get("outliers", {}).get(setup, []))
    if not count:
        return ""
    return f"; {count} outlier{'s' if count > 1 else ''} left out: --include-outliers keeps them"


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
    count += _outlier_note(click.get_current_context(), group.setup)
    _echo_wrapped(f"{group.setup.gpu_config}: {estimating.format_range(group.seconds)} "
                  f"({count})", "  ")
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
    low, high = tables.three_digits(values[0]), tables.three_digits(values[-1])
    return f"{low} s" if low == high else f"{low}-{high} s"


@click.command()
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


# -- fit --------------------------------------------------------------------------------


def _parse_memory(ctx: click.Context, param: click.Parameter, value: str) -> int:
    try:
        return sizes.parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _fit_line(found: fitting.RunFit, memory_bytes: int) -> None:
    card = f"{found.setup.gpu_config} ({record.memory_size(found.capacity_bytes)})"
    if found.basis == fitting.SEARCHED:
        more = " or more (the training set capped the search)" if found.capped else ""
        _echo_wrapped(f"{card}: batch {found.batch}{more}, searched", "    ")
    elif found.basis == fitting.LINE and found.line is not None:
        trials = ", ".join(str(b) for b in found.trial_batches)
        _echo_wrapped(f"{card}: batch {found.batch}, predicted", "    ")
        _echo_wrapped(
            f"from its search's trials at batches {trials}: "
            f"{_gib(found.line.fixed_bytes)} + {_gib(found.line.per_image_bytes)} an image; "
            f"{record.memory_size(memory_bytes)} less {fitting.HEADROOM:.0%} headroom is "
            f"{_gib(fitting.budget_bytes(memory_bytes))}", "      ")
    else:
        _echo_wrapped(f"{card}: at least batch {found.batch}, a floor", "    ")
        _echo_wrapped(
            f"from its peak of {_gib(found.peak_bytes)} at batch {found.peak_batch}: at "
            f"most {_gib(found.peak_bytes / found.peak_batch)} an image", "      ")
    _echo_wrapped(f"settings: {found.setup.describe()}", "      ")


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / frames.GIB:.2f} GiB"


def _verdict(result: fitting.Answer) -> str:
    if not result.basis:
        return "no run says"
    if result.basis == fitting.BOUND:
        return f"fits, at batch {result.batch} at least" if result.batch else \
            "not shown to fit (the runs' peaks are above the budget)"
    if result.batch == 0:
        return "does not fit, not even batch 1"
    low, high = result.batches[0], result.batches[-1]
    spread = f" ({low}-{high} across runs)" if low != high else ""
    capped = any(f.capped and f.batch == result.batch for f in result.deciding)
    return f"fits, at about batch {result.batch}{' or more' if capped else ''}{spread}"


def _how_sure(result: fitting.Answer) -> str:
    """Why the answer deserves the trust it does, in a sentence."""
    runs = len(result.deciding)
    count = f"{runs} run" + ("s" if runs > 1 else "")
    if result.confidence == "high":
        return f"high: searched on a card of (nearly) that memory ({count})"
    if result.basis == fitting.SEARCHED:
        return f"fair: searched at (nearly) that memory, but the {count} disagree"
    tried = sorted({b for f in result.deciding for b in f.trial_batches})
    span = f"{tried[0]}-{tried[-1]}" if tried else ""
    if result.confidence == "fair":
        return (f"fair: predicted by the memory line of {count} searched on another card, "
                f"within the batches its trials measured ({span})")
    if result.confidence == "rough":
        return (f"rough: predicted by the memory line of {count} searched on another card, "
                f"outside the batches its trials measured ({span}); the card's driver "
                "context and allocator are left to the headroom")
    return f"a floor only: one peak at one batch ({count}) bounds the memory per image"


@click.command(help=(
    "Whether a card of --memory trains the model, and at about what batch.\n\n"
    "From the stored runs: a run searched at or near that memory (its card's, or "
    "--memory-limit) answers directly; otherwise the line of peak memory against batch "
    "through each run's search trials predicts the largest batch that leaves "
    f"{fitting.HEADROOM:.0%} of the card free, as the agent's search would. Says which runs "
    "the answer rests on and how sure it is; published figures are answered apart."))
@click.option("--model", type=MODEL, required=True, help="The network: B0, B3 or B7.")
@click.option("--memory", "memory_bytes", metavar="SIZE", required=True,
              callback=_parse_memory, help="The card's memory, e.g. 8GiB, 16GB or 24000MiB "
              "(GiB is 1024^3 bytes, GB 1000^3; a bare G is GiB).")
@_gpu_option("Only runs on GPUs whose name contains this (default: every GPU).")
@INCLUDE_OUTLIERS
@FORMAT
@click.pass_context
def fit(ctx: click.Context, model: str, memory_bytes: int, gpu: str | None,
        include_outliers: bool, fmt: str) -> None:
    """`gpubench fit`: the largest batch a card of `memory_bytes` holds (help above)."""
    model = model.upper()
    measured, published = _runs(ctx, model, gpu, include_outliers)
    found = fitting.answers(measured, memory_bytes)
    found_published = fitting.answers(published, memory_bytes)
    if fmt == "json":
        click.echo(json.dumps({
            "model": model, "memory_bytes": memory_bytes,
            "measured": {label: _answer_document(a) for label, a in found.items()},
            "published": {label: _answer_document(a) for label, a in found_published.items()},
        }, indent=2))
        return
    size = record.memory_size(memory_bytes)
    click.echo(f"{model} on a card of {size} ({memory_bytes / 1e9:.2f} GB)")
    click.echo("")
    click.echo("Measured runs")
    if not found:
        _echo_wrapped(f"none of {model} with batch trials or a searched largest batch", "  ")
    _answer_lines(found, memory_bytes)
    if found_published:
        click.echo("")
        click.echo(PUBLISHED_HEADING)
        _answer_lines(found_published, memory_bytes)


def _answer_lines(found: dict[str, fitting.Answer], memory_bytes: int) -> None:
    for label, result in found.items():
        if not result.basis:
            continue
        _echo_wrapped(f"{label}: {_verdict(result)}", "  ")
        _echo_wrapped(f"How sure: {_how_sure(result)}.", "    ")
        for run_fit in result.deciding:
            _fit_line(run_fit, memory_bytes)
        others = len(result.fits) - len(result.deciding)
        if others:
            _echo_wrapped(f"({others} more run(s) on a less direct basis left aside)", "    ")


def _answer_document(result: fitting.Answer) -> dict[str, Any]:
    return {
        "basis": result.basis,
        "batch": result.batch,
        "confidence": result.confidence,
        "runs": [{**asdict(f), "extrapolated": f.extrapolated} for f in result.deciding],
    }



# -- plot -------------------------------------------------------------------------------


@click.command()
@click.option("--model", type=MODEL, required=True, help="The network: B0, B3 or B7.")
@_gpu_option("Only GPUs whose name contains this (default: every GPU with runs).")
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

    model = model.upper()
    measured, published = _runs(ctx, model, gpu, include_outliers)
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    chosen = [m for m in plot_data.METRICS if not metrics or m.name in metrics]
    for metric in chosen:
        footnotes = []
        absent = plot_data.missing(published, metric)
        if absent:
            footnotes.append(f"not published for {', '.join(sorted(set(absent)))}: left out")
        absent = plot_data.missing(measured, metric)
        if absent:
            footnotes.append(f"not measured for {', '.join(sorted(set(absent)))}: left out")
        for setup, runs in ctx.meta["outliers"].items():
            footnotes.append(f"{setup.gpu_config}, {setup.settings}, batch rule "
                             f"{setup.batch_rule}: {len(runs)} outlier run(s) left out "
                             "(--include-outliers keeps them)")
        for image_format in formats or ("png",):
            target = folder / f"{model.lower()}-{metric.name}.{image_format}"
            charts.metric_chart(model, metric, plot_data.bars(measured, metric, published=False),
                                plot_data.bars(published, metric, published=True), target,
                                footnotes=footnotes)
            click.echo(f"wrote {target}", err=True)


# The commands gpubench.cli adds to its group.
COMMANDS = (estimate, fit, plot)
