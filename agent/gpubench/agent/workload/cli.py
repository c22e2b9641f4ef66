"""`python -m gpubench.agent.workload`: run the benchmark, try a batch, list models, make data.

`run` and `trial` write JSON-lines events (gpubench.events) on stdout and
everything else on stderr; their exit code is 0 for a result, 3 out of memory,
6 bad data, 2 bad settings, 1 any other failure.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from gpubench.errors import GpubenchError
from gpubench.settings import (
    BACKENDS,
    BATCH_RULES,
    MODELS,
    NATIVE_IMAGE_SIZE,
    RULE_STEPS,
    SEARCHED_RULES,
    RunSettings,
    default_backend,
)
from gpubench.settings_cli import Size, as_fields, workload_options


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """The standard benchmark workload: Keras EfficientNet on rock-paper-scissors.

    Runs as a child process of the agent (or in the workload container) and
    reports through JSON-lines events on stdout.
    """


@main.command()
@click.option("--batch-rule", type=click.Choice(BATCH_RULES), default=None, hidden=True,
              help="How the given batch was chosen, for the record (the agent's --quick).")
@workload_options("run")  # --batch among them
def run(**given: Any) -> None:
    """Train one model and report every epoch and the result as events."""
    from gpubench.agent.workload import runner
    from gpubench.agent.workload.failure import report_failure
    from gpubench.agent.workload.stream import claim_stdout

    events = claim_stdout()
    rule = given.pop("batch_rule")  # a given batch's own rule (the agent's --quick)
    values = as_fields(given)
    if rule:
        values["batch_rule"] = rule
    try:
        settings = RunSettings(**values)
    except GpubenchError as exc:
        sys.exit(report_failure(events, exc))
    sys.exit(runner.run(settings, events))


@main.command()
@workload_options("trial")
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
@workload_options("trial")
def check(**given: Any) -> None:
    """Internal: build the model on the CPU and print its identity as a log event, or
    refuse it (exit 2) where gpubench cannot feed it."""
    from gpubench.agent.workload import model_check
    from gpubench.agent.workload.failure import report_failure
    from gpubench.agent.workload.stream import claim_stdout

    events = claim_stdout()
    try:
        settings = RunSettings(**given)
    except GpubenchError as exc:
        sys.exit(report_failure(events, exc))
    sys.exit(model_check.check_main(settings, events))


@main.command()
@workload_options("search")
@click.option("--batch", "batch_rule", type=click.Choice(SEARCHED_RULES),
              default=RULE_STEPS, show_default=True,
              help="The rule whose batch is reported beside the largest.")
@click.option("--limit", "limits", type=Size(), multiple=True,
              help="Search again as a GPU of this size (repeat for several); the whole card "
                   "when none is given.")
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
    from gpubench.settings import PROTOCOL_PARAMETERS

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
@click.option("--driver", is_flag=True,
              help="Also ask the CUDA driver how many GPUs it sees here (libcuda alone).")
def probe(as_json: bool, driver: bool) -> None:
    """What the installed backends were built for: version, CUDA version and GPU
    architectures of torch, TensorFlow and JAX, and Keras's version. Touches no GPU
    (with --driver, only the CUDA driver's count of them)."""
    from gpubench.agent.workload.probe import probe as read_builds

    found = read_builds(driver=driver)
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
    if driver:
        seen = found["driver"]
        click.echo(f"CUDA driver: {seen['error']}" if seen.get("error") else
                   f"CUDA driver {seen['cuda']}: {seen['devices']} GPU(s)")


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
