"""What every `gpubench` command shares, in a module of its own so that the commands'
modules (cli.py, answers_cli.py) import it rather than each other: the model option's
type, the Client built from the group's connection options, the console tables go to."""

from __future__ import annotations

import os
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


def table_console() -> Console:
    """The console for tables on stdout."""
    # Piped into a file or another program, rich would squeeze tables into 80 columns:
    # lines as long as they need, unless $COLUMNS asks for a width.
    if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit():
        return Console()
    return Console(width=400)
