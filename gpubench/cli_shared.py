"""What every `gpubench` command shares, in a module of its own so that the commands'
modules (cli.py, answers_cli.py) import it rather than each other: the model option's
type, the Client built from the group's connection options, the console tables go to."""

from __future__ import annotations

import os
import shutil
import sys

import click
from rich.console import Console

from gpubench import record
from gpubench.client import Client

MODEL = click.Choice(record.MODELS, case_sensitive=False)


def query_client(ctx: click.Context) -> Client:
    """The client for this command, built from the global options and closed at exit."""
    options = ctx.find_root().obj
    client = Client(
        options["collector"],
        options["token"],
        ca=options["ca"],
        tls=options["tls"],
        timeout=options["timeout"],
    )
    return ctx.with_resource(client)


# The width of output that goes where no terminal says its own: a file, a pipe, `less`,
# `docker compose exec -T`.
DEFAULT_WIDTH = 80


def output_width(given: int | None = None) -> int:
    """How many columns output is laid out in: `given` (--width) if any, else the
    terminal's where stdout is one, else $COLUMNS, else DEFAULT_WIDTH."""
    if not given:
        context = click.get_current_context(silent=True)
        options = context.find_root().obj if context is not None else None
        given = options.get("width") if isinstance(options, dict) else None
    if given:
        return int(given)
    columns = os.environ.get("COLUMNS", "")
    if sys.stdout.isatty() and not columns.isdigit():
        return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    return int(columns) if columns.isdigit() and int(columns) > 0 else DEFAULT_WIDTH


def table_console() -> Console:
    """The console for tables on stdout, `output_width()` columns wide."""
    return Console(width=output_width())
