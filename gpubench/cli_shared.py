"""What every `gpubench` command shares, in a module of its own so that the commands'
modules (cli.py, answers_cli.py) import it rather than each other: the model option's
type, the Client built from the group's connection options, the console tables go to."""

from __future__ import annotations

import os
import sys

import click
from rich.console import Console

from gpubench.client import ADDRESS_ENV, FROM_DEFAULT, TOKEN_ENV, Client, Origins
from gpubench.settings_cli import Model

MODEL = Model()
# How a person sets the collector's address and token on the command line.
SET_ADDRESS = f"--collector HOST:PORT or ${ADDRESS_ENV}"
SET_TOKEN = f"--token or ${TOKEN_ENV}"


def given_by(ctx: click.Context, name: str, flag: str, env: str) -> str:
    """Where option `name` of `ctx`'s command got its value: `flag`, "$ENV", FROM_DEFAULT,
    or "" when it has none."""
    source = ctx.get_parameter_source(name)
    if source == click.core.ParameterSource.COMMANDLINE:
        return flag
    if source == click.core.ParameterSource.ENVIRONMENT:
        return f"${env}"
    return FROM_DEFAULT if ctx.params.get(name) else ""


def connection_origins(ctx: click.Context, *, set_token: str = SET_TOKEN) -> Origins:
    """Where the --collector and --token of `ctx`'s command came from, for the client's
    errors."""
    token = given_by(ctx, "token", "--token", TOKEN_ENV)
    return Origins(address=given_by(ctx, "collector", "--collector", ADDRESS_ENV),
                   token="" if token == FROM_DEFAULT else token,
                   set_address=SET_ADDRESS, set_token=set_token)


def query_client(ctx: click.Context) -> Client:
    """The client for this command, built from the global options and closed at exit."""
    options = ctx.find_root().obj
    client = Client(
        options["collector"],
        options["token"],
        ca=options["ca"],
        tls=options["tls"],
        timeout=options["timeout"],
        origins=options["origins"],
    )
    return ctx.with_resource(client)


def table_console() -> Console:
    """The console for tables on stdout."""
    # Piped into a file or another program, rich would squeeze tables into 80 columns:
    # lines as long as they need, unless $COLUMNS asks for a width.
    if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit():
        return Console()
    return Console(width=400)
