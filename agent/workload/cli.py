"""`python -m gpubench.agent.workload`: run the benchmark, try a batch, list models, make data.

`run` and `trial` write JSON-lines events (gpubench.events) on stdout and
everything else on stderr; their exit code is 0 for a result, 3 out of memory,
6 bad data, 2 bad settings, 1 any other failure.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click
from gpubench.agent.workload.options import (
    BACKENDS,
    BATCH_RULES,
    DEFAULT_EPOCHS,
    DEFAULT_SEED,
    MODELS,
    NATIVE_IMAGE_SIZE,
    PIPELINES,
    PRECISIONS,
    RULE_GIVEN,
    RULE_LARGEST,
    RULE_STEPS,
    RunSettings,
    default_backend,
    parse_size,
)

from gpubench.errors import GpubenchError

# The batch search's defaults (batch_search.DEFAULT_*; that module is not imported here
# so that --help stays quick).
DEFAULT_MAX_TRIALS = 8
DEFAULT_BUDGET = 120.0


class BatchSize(click.ParamType):
    """A batch size and how it is chosen: N (given), 'auto' (the speed rule) or 'largest'."""

    name = "N|auto|largest"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[int | None, str]:
        if isinstance(value, tuple):
            return value
        text = str(value).strip().lower()
        if text == "auto":
            return None, RULE_STEPS
        if text == "largest":
            return None, RULE_LARGEST
        try:
            return int(text), RULE_GIVEN
        except ValueError:
            self.fail(f"{value!r} is neither a whole number, 'auto' nor 'largest'", param, ctx)


class Size(click.ParamType):
    """A size in bytes: 16GiB, 8GB, 12000MiB or a plain number of bytes."""

    name = "SIZE"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except GpubenchError as exc:
            self.fail(str(exc), param, ctx)


def _model_options(func: Callable) -> Callable:
    """The options `run` and `trial` share: what network, how, on what."""
    options = [
        click.option("--model", type=click.Choice(MODELS), default="B0", show_default=True,
                     help="EfficientNet variant: B0 (224 px), B3 (300 px) or B7 (600 px)."),
        click.option("--precision", type=click.Choice(PRECISIONS), default="float32",
                     show_default=True,
                     help="float32 is the protocol; mixed_* keep float32 weights and compute in "
                          "16 bits."),
        click.option("--gpus", type=click.IntRange(min=0), default=1, show_default=True,
                     help="GPUs to train on, data-parallel (global batch = batch x GPUs); "
                          "0 trains on the CPU."),
        click.option("--backend", type=click.Choice(BACKENDS), default=default_backend,
                     show_default="KERAS_BACKEND, else tensorflow",
                     help="Framework under Keras."),
        click.option("--image-size", type=click.IntRange(min=32), default=None,
                     help="Pixels per side fed to the network, overriding the model's native "
                          f"size ({', '.join(f'{m} {s}' for m, s in NATIVE_IMAGE_SIZE.items())}); "
                          "for tests and tiny runs."),
        click.option("--seed", type=int, default=DEFAULT_SEED, show_default=True,
                     help="Seed of the train/validation split, the shuffles and the weights' "
                          "initialisation (the protocol's split uses 12)."),
        click.option("--jit-compile/--no-jit-compile", default=False, show_default=True,
                     help="Compile the training step (XLA on TensorFlow and JAX, torch.compile "
                          "on torch); the protocol did not."),
        click.option("--cuda-graphs/--no-cuda-graphs", default=None,
                     help="torch backend, one GPU: record each training and validation step "
                          "once as a CUDA graph (one per batch shape) and replay it, so the host "
                          "launches a step with one call. Random numbers then come from torch's "
                          "default generator (the same distributions, not Keras's sequence); "
                          "not with mixed_float16 or --jit-compile [default: on where it "
                          "applies]."),
        click.option("--batched-augmentation/--keras-augmentation", default=None,
                     help="torch backend: compute the random rotation and zoom for the whole "
                          "batch at once (the same transforms, bit for bit) instead of Keras's "
                          "image-by-image loop [default: on with torch]."),
        click.option("--fused-batchnorm/--keras-batchnorm", default=None,
                     help="torch backend: compute batch normalization with torch's fused "
                          "kernel (the same normalisation and moving averages) instead of "
                          "Keras's element-wise float32 operations [default: on with torch]."),
        click.option("--channels-first/--channels-last", default=None,
                     help="torch backend: lay the images and every activation out as "
                          "(channels, height, width), torch's own order, instead of the "
                          "protocol's channels last, which Keras on torch transposes around "
                          "every convolution [default: channels first with torch]."),
        click.option("--trial-steps", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Training steps at its batch each batch-size trial runs."),
        click.option("--memory-limit", "memory_limit_bytes", type=Size(), default=None,
                     help="Behave as a GPU of this size (torch: the allocator's share of the "
                          "card; TensorFlow: a logical device limit), e.g. 16GiB."),
        click.option("--trial-address-space", type=click.IntRange(min=1), default=None,
                     hidden=True,
                     help="Cap each batch-size trial's address space (tests of the search)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """The standard benchmark workload: Keras EfficientNet on rock-paper-scissors.

    Runs as a child process of the agent (or in the workload container) and
    reports through JSON-lines events on stdout.
    """


def _search_options(func: Callable) -> Callable:
    """The options of the batch search (`run --batch auto|largest` and `search`)."""
    for option in reversed([
        click.option("--max-trials", type=click.IntRange(min=2), default=DEFAULT_MAX_TRIALS,
                     show_default=True, help="Most batch-size trials a search may run."),
        click.option("--search-budget", type=click.FloatRange(min=1), default=DEFAULT_BUDGET,
                     show_default=True,
                     help="Seconds a search may take; it keeps the largest batch confirmed "
                          "by then."),
    ]):
        func = option(func)
    return func


@main.command()
@_model_options
@_search_options
@click.option("--batch", type=BatchSize(), default="auto", show_default=True,
              help="Images per GPU per step: N; 'auto', the largest power of two that fits "
                   "and leaves at least 8 training steps an epoch; or 'largest', the largest "
                   "that fits.")
@click.option("--batch-rule", type=click.Choice(BATCH_RULES), default=None, hidden=True,
              help="How the given batch was chosen, for the record (the agent's --quick).")
@click.option("--data", default="synthetic", show_default=True,
              help="'synthetic' (generated once into the cache) or a folder with one "
                   "sub-folder of PNG/JPEG images per class.")
@click.option("--epochs", type=click.IntRange(min=2), default=DEFAULT_EPOCHS, show_default=True,
              help="Epochs to train; epoch 2 is the measured one.")
@click.option("--limit-images", type=click.IntRange(min=10), default=None,
              help="Use only this many images (smoke runs).")
@click.option("--pipeline", type=click.Choice(PIPELINES), default="cached", show_default=True,
              help="cached: decode once and prefetch (measures the GPU); seed: decode every "
                   "epoch as the protocol's scripts did.")
@click.option("--weights", default="none", show_default=True,
              help="Starting weights of the EfficientNet: none, imagenet (Keras's cache or a "
                   "download) or a weights file.")
@click.option("--data-on-device/--data-on-host", default=False, show_default=True,
              help="torch backend, cached pipeline: keep the decoded images on the GPU and "
                   "gather batches there.")
@click.option("--replicas-on-cpu", type=click.IntRange(min=0), default=0, hidden=True,
              help="torch: data-parallel over this many CPU processes (tests of --gpus N).")
def run(**given: Any) -> None:
    """Train one model and report every epoch and the result as events."""
    from gpubench.agent.workload import runner
    from gpubench.agent.workload.failure import report_failure
    from gpubench.agent.workload.stream import claim_stdout

    events = claim_stdout()
    batch, rule = given.pop("batch")
    rule = given.pop("batch_rule") or rule
    try:
        settings = RunSettings(batch=batch, batch_rule=rule, **given)
    except GpubenchError as exc:
        sys.exit(report_failure(events, exc))
    sys.exit(runner.run(settings, events))


@main.command()
@_model_options
@click.option("--batch", type=click.IntRange(min=1), required=True, help="Batch size to try.")
@click.option("--kind", type=click.Choice(("probe", "confirm")), default="probe",
              show_default=True, help="Why the trial is made (the record keeps it).")
def trial(batch: int, kind: str, **given: Any) -> None:
    """Internal: train a few steps at one batch size and print one batch_trial event."""
    from gpubench.agent.workload import trials
    from gpubench.agent.workload.failure import report_failure
    from gpubench.agent.workload.stream import claim_stdout

    events = claim_stdout()
    try:
        settings = RunSettings(batch=batch, **given)
    except GpubenchError as exc:
        sys.exit(report_failure(events, exc))
    sys.exit(trials.trial_main(settings, batch, kind, events))


@main.command()
@_model_options
@_search_options
@click.option("--batch", "batch_rule", type=click.Choice((RULE_STEPS, RULE_LARGEST)),
              default=RULE_STEPS, show_default=True,
              help="The rule whose batch is reported beside the largest.")
@click.option("--limit", "limits", type=Size(), multiple=True,
              help="Search again as a GPU of this size (repeat for several); the whole card "
                   "when none is given.")
@click.option("--data", default="synthetic", show_default=True,
              help="The dataset whose epoch the confirm trials take (only its image counts "
                   "are read).")
@click.option("--limit-images", type=click.IntRange(min=10), default=None,
              help="Use only this many images.")
def search(limits: tuple[int, ...], **given: Any) -> None:
    """Only the batch search: the largest batch that fits, for each --limit; one
    search_done event each, no training."""
    from gpubench.agent.workload import runner
    from gpubench.agent.workload.failure import report_failure
    from gpubench.agent.workload.stream import claim_stdout

    events = claim_stdout()
    try:
        settings = RunSettings(**given)
    except GpubenchError as exc:
        sys.exit(report_failure(events, exc))
    sys.exit(runner.search_only(settings, limits, events))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--backend", type=click.Choice(BACKENDS), default=default_backend,
              show_default="KERAS_BACKEND, else tensorflow", help="Framework under Keras.")
@click.option("--image-size", type=click.IntRange(min=32), default=None,
              help="Build at this size instead of each model's native one (the counts do not "
                   "depend on it).")
def models(as_json: bool, backend: str, image_size: int | None) -> None:
    """Build B0, B3 and B7 and print their parameter counts next to the protocol's."""
    from gpubench.agent.workload import backend as frameworks
    from gpubench.agent.workload.options import PROTOCOL_PARAMETERS

    frameworks.select(backend, 0)
    frameworks.import_keras()
    from gpubench.agent.workload import model as net

    found = {}
    for name in MODELS:
        size = image_size or NATIVE_IMAGE_SIZE[name]
        counts = net.parameter_counts(net.build(name, size))
        total, trainable, frozen = PROTOCOL_PARAMETERS[name]
        found[name] = {
            **counts,
            "image_size": size,
            "protocol": {"total": total, "trainable": trainable, "non_trainable": frozen},
            "matches_protocol": (counts["total"], counts["trainable"], counts["non_trainable"])
            == PROTOCOL_PARAMETERS[name],
        }
    if as_json:
        click.echo(json.dumps(found, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Protocol models (parameters)")
    for column in ("model", "image size", "total", "trainable", "non-trainable", "as protocol"):
        table.add_column(column, justify="right")
    for name, row in found.items():
        table.add_row(name, str(row["image_size"]), f"{row['total']:,}", f"{row['trainable']:,}",
                      f"{row['non_trainable']:,}", "yes" if row["matches_protocol"] else "NO")
    Console().print(table)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (the agent's form).")
def probe(as_json: bool) -> None:
    """What the installed backends were built for: version, CUDA version and GPU
    architectures of torch, TensorFlow and JAX, and Keras's version. Touches no GPU."""
    from gpubench.agent.workload.probe import probe as read_builds

    found = read_builds()
    if as_json:
        click.echo(json.dumps(found, separators=(",", ":")))
        return
    for name, build in found["backends"].items():
        cuda = f"CUDA {build['cuda']}" if build["cuda"] else "no CUDA (a CPU build)"
        archs = " ".join(build["archs"])
        line = f"{name:<11} {build['version']:<16} {cuda}" + (f": {archs}" if archs else "")
        click.echo(line + (f" [{build['plugin']}]" if build.get("plugin") else ""))
        if build.get("error"):
            click.echo(f"{'':<11} {build['error']}")
    if not found["backends"]:
        click.echo("no backend installed (torch, tensorflow, jax)")
    click.echo(f"keras {found['keras'] or 'not installed'}, Python {found['python']}")


@main.command("make-data")
@click.option("--limit-images", type=click.IntRange(min=1, max=2136), default=2136,
              show_default=True, help="Generate images 0..N-1 of the synthetic set.")
def make_data(limit_images: int) -> None:
    """Generate the synthetic dataset into the cache (once) and print its folder."""
    from gpubench.agent.workload import synthetic

    click.echo(str(synthetic.ensure(limit_images)))


def entry() -> None:
    """Console entry point: user-facing errors as one line and their exit code."""
    try:
        main(standalone_mode=True)
    except GpubenchError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
