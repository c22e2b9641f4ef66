"""`gpubench`: query a collector - compare GPUs, list and show runs, export them.

A thin layer over `gpubench.Client`: tables go to stdout, json and csv go to stdout
for scripts, warnings go to stderr. A `GpubenchError` ends the command with one message
"gpubench: error: ..." on stderr (wrapped at 80 columns) and its exit code (EXIT_CODES
says which).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import click
import pandas as pd

from gpubench import answers, answers_cli, cli_gpus, comparison_key, frames, prices, record, tables
from gpubench.cli_shared import (
    MODEL,
    MODEL_HELP,
    connection_origins,
    output_width,
    query_client,
    table_console,
)
from gpubench.cli_vocabulary import HELP_CONTEXT, gpu_option
from gpubench.client import ADDRESS_ENV, DEFAULT_ADDRESS, TOKEN_ENV, Client
from gpubench.errors import ExitCode, GpubenchError, RequestRefused, wrap_message
from gpubench.token_file import TOKEN_FILE_ENV, TOKEN_FILE_HELP, say_token_in_argv, token_from_file
from gpubench.usage import example, usage_message
from gpubench.versions import VERSION

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


class CommandFailed(click.ClickException):
    """A GpubenchError at the CLI boundary: one message on stderr, the error's exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        # click declares exit_code a ClassVar, yet reads it from the instance.
        self.exit_code = exit_code  # type: ignore[misc]

    def show(self, file: Any = None) -> None:
        # Wrapped at the output's width, as every line the command prints.
        click.echo(wrap_message("gpubench: error: ", self.format_message(), output_width()),
                   err=True, file=file)


# The options that say how to reach the collector, and the output's width. They belong to
# the group (`gpubench --collector X runs list`) and are accepted after any subcommand too
# (`gpubench runs list --collector X`): Group.add_command gives every command a copy,
# which overrides the group's value when given.
CONNECTION_OPTIONS = ("collector", "token", "token_file", "ca", "tls", "timeout", "width")


def _override_connection(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """A connection option given after the subcommand replaces the group's value."""
    if value is None or value is False:
        return
    options = ctx.find_root().obj
    if isinstance(options, dict) and param.name:
        options[param.name] = value
        if param.name == "token_file":
            options["token"] = token_from_file(value)
        if param.name in ("collector", "token", "token_file"):  # the errors name the flag
            field = "address" if param.name == "collector" else "token"
            flag = "--" + param.name.replace("_", "-")
            options["origins"] = replace(options["origins"], **{field: flag})
        if param.name == "token":
            say_token_in_argv("gpubench")


def _connection_copies(command: click.Command) -> list[click.Option]:
    """The group's connection options as `command` accepts them after its name: no
    default and no environment variable (the group has those), nothing passed to the
    command's function."""
    taken = {opt for param in command.params for opt in param.opts}
    copies = []
    for param in cli.params:
        if param.name not in CONNECTION_OPTIONS or taken.intersection(param.opts):
            continue
        assert isinstance(param, click.Option)
        copies.append(click.Option(
            param.opts, type=param.type, is_flag=param.is_flag, default=None,
            metavar=param.metavar, expose_value=False, callback=_override_connection,
            hidden=param.hidden,
            help=f"{param.help} Also accepted here, after the command.",
        ))
    return copies


class Group(click.Group):
    """The command group that turns user-facing errors into one message each, and
    whose commands (nested ones too) accept the connection options after their name."""

    # Nested groups (`gpubench runs ...`) are of this class too.
    group_class = type

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        """Register `cmd`; a command that is not a group gets the connection options."""
        if not isinstance(cmd, click.Group):
            cmd.params.extend(_connection_copies(cmd))
        super().add_command(cmd, name)

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:  # the group's own options
            raise bad_usage(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # a command's options, or no such command
            raise bad_usage(exc) from None
        except GpubenchError as exc:
            raise CommandFailed(str(exc), exc.exit_code) from exc
        except KeyboardInterrupt:
            raise CommandFailed("interrupted", ExitCode.INTERRUPTED) from None


def bad_usage(error: click.UsageError) -> click.ClickException:
    """click's usage error as this command's errors are written ("gpubench: error:
    --model: ..."), naming the --help that lists the flags, exit 2. A group given no
    command (click shows its help) is left as it is."""
    if isinstance(error, getattr(click.exceptions, "NoArgsIsHelpError", ())):  # click >= 8.2
        return error
    return CommandFailed(usage_message(error, "gpubench"), ExitCode.USAGE)


PRECISION = click.Choice(record.PRECISIONS)
BACKEND = click.Choice(record.BACKENDS)


# -- the comparison key's flags, made from its table (gpubench.comparison_key) -----------


def _pin_type(dimension: comparison_key.Dimension) -> click.ParamType | None:
    """The click type of a dimension's flag: its values where they are few, a count
    from 1, else text (the collector checks it)."""
    if dimension.choices and dimension.listed:
        return click.Choice(dimension.choices)
    if dimension.numeric:
        return click.IntRange(min=1)
    return None


def _pin_option(dimension: comparison_key.Dimension, help_text: str,
                **settings: Any) -> Decorator:
    return click.option(dimension.flag, dimension.name, type=_pin_type(dimension),
                        metavar=dimension.metavar or None, help=help_text, **settings)


def compare_pins(command: Callable[..., Any]) -> Callable[..., Any]:
    """`gpubench compare`'s flags: one per dimension of the comparison key, each
    pinning its value (the command's keyword argument of the dimension's name)."""
    for dimension in reversed(comparison_key.DIMENSIONS):
        command = _pin_option(dimension, dimension.help)(command)
    return command


def leaderboard_pins(command: Callable[..., Any]) -> Callable[..., Any]:
    """`gpubench leaderboard`'s flags: the dimensions it ranks one value at a time (with
    their defaults) or filters by."""
    for dimension in reversed(comparison_key.DIMENSIONS):
        if not dimension.leaderboard_help:
            continue
        default = dimension.leaderboard_default or None
        command = _pin_option(dimension, dimension.leaderboard_help, default=default,
                              show_default=default is not None)(command)
    return command


def _format_option(*choices: str, default: str = "table") -> Any:
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices),
        default=default,
        show_default=True,
        help="table for people; json or csv (on stdout) for scripts.",
    )


def _warn(lines: list[str]) -> None:
    for line in lines:
        click.echo(f"warning: {line}", err=True)


def _emit_frame(frame: pd.DataFrame, fmt: str, table: Any) -> None:
    if fmt == "json":
        click.echo(json.dumps(frames.frame_records(frame), indent=2))
    elif fmt == "csv":
        click.echo(frames.csv_text(frame), nl=False)
    else:
        table_console().print(table)


# What each exit code means here (the numbers: gpubench.errors.ExitCode); README's too.
EXIT_CODES = (
    "Exit codes: 0 done; 1 the collector refused the request or failed; 2 bad flags, "
    "arguments or prices; 3 the collector could not be reached or did not answer in time; "
    "4 the token is missing, wrong or not allowed that; 5 no such run, token or GPU with "
    "runs; 6 a file that cannot be read or written (a CA certificate, a chart, an export); "
    "130 interrupted (Ctrl-C)."
)


@click.group(cls=Group, context_settings=HELP_CONTEXT,
             epilog=EXIT_CODES)
@click.option(
    "--collector",
    metavar="HOST:PORT",
    envvar=ADDRESS_ENV,
    default=DEFAULT_ADDRESS,
    show_default=True,
    help=f"The collector's address (or ${ADDRESS_ENV}).",
)
# Hidden: --token is the old spelling, kept for one release; it works and says the new one.
@click.option("--token", envvar=TOKEN_ENV, default=None, hidden=True,
              help=f"The access token itself (or ${TOKEN_ENV}).")
@click.option("--token-file", metavar="FILE", envvar=TOKEN_FILE_ENV,
              type=click.Path(dir_okay=False, allow_dash=True), help=TOKEN_FILE_HELP)
@click.option(
    "--ca",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="PEM certificate to trust: talk TLS to the collector, verified against this CA.",
)
@click.option(
    "--tls",
    is_flag=True,
    help="Talk TLS to the collector, verified against the system's roots (implied by --ca).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds to wait for each answer from the collector.",
)
@click.option(
    "--width",
    type=click.IntRange(min=40),
    default=None,
    metavar="COLUMNS",
    help="Lay tables and text out in this many columns (default: the terminal's width; "
    "80, or $COLUMNS, when stdout is no terminal).",
)
@click.version_option(VERSION, prog_name="gpubench")
@click.pass_context
def cli(
    ctx: click.Context, collector: str, token: str | None, token_file: str | None,
    ca: str | None, tls: bool, timeout: float, width: int | None,
) -> None:
    """Query a gpubench collector: compare GPUs on the standard EfficientNet benchmark,
    list, show, delete and export runs."""
    if token_file is not None:
        token = token_from_file(token_file)
    elif ctx.get_parameter_source("token") is click.core.ParameterSource.COMMANDLINE:
        say_token_in_argv("gpubench")
    ctx.obj = {"collector": collector, "token": token, "ca": ca, "tls": tls, "timeout": timeout,
               "origins": connection_origins(ctx), "width": width}


@cli.command(epilog=example('gpubench compare --model B7 --baseline "Tesla T4"'))
@click.option("--model", type=MODEL, required=True, help=MODEL_HELP)
@click.option(
    "--baseline",
    metavar="NAME",
    help='The GPU of the 1.0x reference, named as --gpu names one, e.g. "Tesla T4" '
    "(default: the slowest).",
)
@click.option(
    "--baseline-count",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="How many GPUs the baseline configuration has.",
)
@gpu_option("Compare only this GPU (repeat for several; default: every GPU).", name="gpus",
            multiple=True)
@compare_pins
@click.option(
    "--allow-mixed",
    is_flag=True,
    help=f"Compare runs that differ in {comparison_key.WORDS_LIST}.",
)
@click.option("--include-outliers", is_flag=True, help="Keep runs flagged as outliers.")
@click.option("--include-flagged", is_flag=True,
              help="Keep runs the collector flagged as implausible (faster than the card "
              "allows, a card unlike its name).")
@click.option(
    "--chart",
    type=click.Path(dir_okay=False, writable=True),
    help="Also draw the speedups into this image file (PNG, SVG or PDF; needs matplotlib).",
)
@click.option("--price", "price_options", multiple=True, metavar="NAME=USD",
              help='A card\'s price in USD, e.g. --price "Tesla T4=2300" (repeat for '
              "several): adds images/s per 1,000 USD beside img/J.")
@click.option("--prices", "price_file", type=click.Path(dir_okay=False), metavar="FILE",
              help='Prices in USD by GPU name: a CSV file of "GPU name,USD" lines or '
              'a JSON object {"Tesla T4": 2300}.')
@_format_option("table", "json", "csv")
@click.pass_context
def compare(ctx: click.Context, model: str, chart: str | None, price_options: tuple[str, ...],
            price_file: str | None, fmt: str, **filters: Any) -> None:
    """Compare GPU configurations on one model: epoch-2 time, throughput, largest
    batch, peak memory, energy and speedup against a baseline.

    Only like with like: runs that differ in anything that changes what was timed are
    refused, each difference named with the flag that pins it. Published figures (the
    article's, transcribed) are shown apart, below, and so are runs on cards not yet in
    the collector's GPU catalogue (never the baseline; "in_catalogue" false in --format
    csv). With prices, what the cards buy: images/s per 1,000 USD beside img/J."""
    # Read before the collector is asked: a bad price fails at once, naming its line.
    book = prices.load(price_options, [price_file] if price_file else [])
    client = query_client(ctx)
    cli_gpus.check_compared(client, model, filters["gpus"], filters["baseline"])
    frame = client.compare(model, **filters)
    published = frames.published_of(frame)
    uncatalogued = frames.uncatalogued_of(frame)
    if fmt == "json":
        click.echo(json.dumps(answers.cost_document(frame, book), indent=2))
    priced = len(book) > 0 and not frame.empty
    if priced:
        frame = prices.cost_frame(frame, book)
    if fmt == "csv":
        click.echo(frames.csv_text(frames.with_uncatalogued(frame)), nl=False)
    elif fmt == "table":
        console = table_console()
        if frame.empty:
            if not frame.attrs.get("warnings"):
                click.echo(f"no runs of {model} match", err=True)
        else:
            console.print(tables.compare_table(frame))
        if not published.empty:
            console.print(tables.published_table(
                published, beside="the runs above" if not frame.empty else ""))
        if not uncatalogued.empty:
            console.print(tables.uncatalogued_table(uncatalogued))
        if priced:
            console.print(tables.cost_table(frame))
    if fmt != "json":
        _warn(list(frame.attrs.get("warnings", [])) + (prices.unpriced(frame) if priced else []))
    if chart:
        from gpubench import charts

        charts.speedup_chart(frame, chart)
        click.echo(f"chart written to {chart}", err=True)


@cli.group()
def runs() -> None:
    """List, show and delete stored runs."""


@runs.command("list", epilog=example('gpubench runs list --gpu "NVIDIA H200" --model B3'))
@gpu_option("Only runs on this GPU.")
@click.option("--model", type=MODEL, help="Only this network.")
@click.option("--backend", type=BACKEND, help="Only this Keras backend.")
@click.option("--precision", type=PRECISION, help="Only this precision.")
@click.option("--gpu-count", type=click.IntRange(min=1), help="Only runs on this many GPUs.")
@click.option("--submitter", metavar="TOKEN_NAME", help="Only runs submitted with this token.")
@click.option("--since", metavar="WHEN", help="Created at or after (ISO 8601, e.g. 2025-06-30).")
@click.option("--until", metavar="WHEN", help="Created before (ISO 8601).")
@click.option(
    "--limit", type=click.IntRange(min=1), default=50, show_default=True, help="At most this many."
)
@_format_option("table", "json", "csv")
@click.pass_context
def runs_list(
    ctx: click.Context,
    gpu: str | None,
    model: str | None,
    backend: str | None,
    precision: str | None,
    gpu_count: int | None,
    submitter: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    fmt: str,
) -> None:
    """Stored runs, newest first."""
    client = query_client(ctx)
    filters: dict[str, Any] = {
        "model": model or None, "backend": backend, "precision": precision,
        "gpu_count": gpu_count, "submitter": submitter, "since": since, "until": until}
    frame = frames.runs_frame(cli_gpus.runs_on(client, gpu, limit, **filters) if gpu
                              else client.iter_runs(**filters, limit=limit))
    if fmt == "table" and frame.empty:
        click.echo("no runs match", err=True)
        return
    if fmt != "table":
        _emit_frame(frame, fmt, None)
        return
    # Published runs (transcribed, not measured) are listed apart from measured ones.
    console = table_console()
    measured, published = frame[~frame["published"]], frame[frame["published"]]
    if not measured.empty:
        for table in tables.runs_tables(measured, title="measured runs",
                                        legend=published.empty):
            console.print(table)
    if not published.empty:
        for table in tables.runs_tables(published, title="published figures (transcribed, "
                                        "not measured by gpubench)"):
            console.print(table)


def _stored_run(client: Client, run_id: str) -> Any:
    """The run RUN_ID names, in full or by its first characters (the collector reads a
    prefix); one too short, or that several run ids start with, is a usage error."""
    try:
        return client.get_run(run_id)
    except RequestRefused as exc:
        if getattr(exc, "status_code", "") == "INVALID_ARGUMENT":
            raise GpubenchError(str(exc), exit_code=ExitCode.USAGE) from None
        raise


@runs.command("show", epilog=example('gpubench runs show 01d47a43'))
@click.argument("run_id")
@_format_option("table", "json")
@click.pass_context
def runs_show(ctx: click.Context, run_id: str, fmt: str) -> None:
    """One stored run (RUN_ID, or the first characters of one as `runs list` shows them):
    the full record as json, or a summary with its epochs."""
    stored = _stored_run(query_client(ctx), run_id)
    if fmt == "json":
        click.echo(json.dumps(frames.stored_run_dict(stored), indent=2))
        return
    console = table_console()
    for table in tables.run_tables(stored):
        console.print(table)


@runs.command("delete", epilog=example('gpubench runs delete 01d47a43'))
@click.argument("run_id")
@click.pass_context
def runs_delete(ctx: click.Context, run_id: str) -> None:
    """Delete a run (RUN_ID in full, or a prefix only one run id starts with; only its
    submitter or an admin may)."""
    client = query_client(ctx)
    # The collector reads a prefix of the id; deleting takes the id in full.
    deleted = client.delete_run(_stored_run(client, run_id).run.run_id)
    click.echo(f"deleted run {deleted or run_id}")


@cli.command(epilog=example('gpubench leaderboard --model B0 --precision float32'))
@click.option("--model", type=MODEL, required=True, help=MODEL_HELP)
@leaderboard_pins
@click.option("--include-flagged", is_flag=True,
              help="Rank runs the collector flagged as implausible too (look-alikes of "
              "catalogued GPU names among them; runs on cards not yet catalogued are "
              "listed apart either way).")
@click.option("--corroborated", "corroborated_only", is_flag=True,
              help="Only the configurations whose figure a reference run or several "
              "submitters corroborate.")
@click.option(
    "--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Entries to show."
)
@_format_option("table", "json", "csv")
@click.pass_context
def leaderboard(
    ctx: click.Context, model: str, precision: str | None, backend: str | None, settings: str,
    batch_rule: str, benchmark_version: str | None, include_flagged: bool,
    corroborated_only: bool, limit: int, fmt: str
) -> None:
    """The GPU configurations of one model ranked by the median epoch-2 time of their runs,
    fastest first, with each one's best (fastest) run beside it.

    Only runs of the standard benchmark (the model's native image size, 1709 training
    images, the whole card), of the newest benchmark version, one settings label and one
    batch rule at a time (the default run's unless asked). Outliers, runs flagged as
    implausible and published figures are left out. Runs on cards not yet in the
    collector's GPU catalogue are listed after the ranked table, under their own heading,
    never ranked with it ("in_catalogue" false in --format json and csv).

    One submitter, one voice: a configuration's medians are the median of its submitters'
    medians. Each says how many submitters stand behind it, and whether it is
    corroborated (a reference run or several submitters agree) or "one source"."""
    if ctx.get_parameter_source("settings") is click.core.ParameterSource.DEFAULT:
        settings = record.default_settings(model)  # Keras's own path for all but B0-B7
    frame = query_client(ctx).leaderboard(
        model, precision=precision, limit=limit, backend=backend, settings=settings,
        batch_rule=batch_rule, benchmark_version=benchmark_version,
        include_flagged=include_flagged, corroborated_only=corroborated_only)
    if fmt == "table" and frame.empty:
        click.echo(wrap_message("", f"no runs of {model} with settings {settings} and "
                                f"batch rule {batch_rule} yet (--settings and --batch-rule "
                                "choose others)" + _stored_settings(ctx, model),
                                output_width()), err=True)
        return
    if fmt != "table":
        _emit_frame(frame, fmt, None)
        return
    ranked, apart = frame[frame["in_catalogue"]], frame[~frame["in_catalogue"]]
    console = table_console()
    if not ranked.empty:
        console.print(tables.leaderboard_table(ranked))
    if not apart.empty:
        console.print(tables.uncatalogued_table(apart))


def _stored_settings(ctx: click.Context, model: str) -> str:
    """The settings and batch rules the stored OK runs of `model` have, most runs first
    ("; stored runs of B0: --settings keras --batch-rule given (3), ..."), or that there
    are none: what an empty leaderboard can be asked for instead."""
    runs = query_client(ctx).list_runs(model=model, limit=1000)
    runs = runs[(runs["status"] == "ok") & ~runs["published"]] if not runs.empty else runs
    if runs.empty:
        return f"; the collector holds no measured run of {model}"
    counts = runs.groupby(["settings", "batch_rule"]).size().sort_values(ascending=False)
    return f"; stored runs of {model}: " + ", ".join(
        f"--settings {settings} --batch-rule {rule or 'unrecorded'} ({count})"
        for (settings, rule), count in counts.items())


@cli.command(epilog=example('gpubench export --format csv --out runs.csv'))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["parquet", "csv"]),
    default="parquet",
    show_default=True,
    help="File format.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, writable=True),
    required=True,
    help="The file to write (replaced if it exists).",
)
@click.pass_context
def export(ctx: click.Context, fmt: str, out: str) -> None:
    """Write every stored run to a file, one row per run with flattened columns."""
    count = query_client(ctx).export(out, format=fmt)
    click.echo(f"wrote {count} runs to {out}", err=True)




for _command in answers_cli.COMMANDS:  # estimate, fit, plot
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> None:
    """The `gpubench` console script."""
    cli.main(args=argv, prog_name="gpubench")


if __name__ == "__main__":
    main()
