"""What every `gpubench` command shares, in a module of its own so that the commands'
modules (cli.py, answers_cli.py) import it rather than each other: the model option's
type, the Client built from the group's connection options, the console tables go to."""

from __future__ import annotations

import os
import shutil
import sys

import click
from rich.console import Console

from gpubench.client import ADDRESS_ENV, FROM_DEFAULT, TOKEN_ENV, Client, Origins
from gpubench.settings_cli import Model, stored_model
from gpubench.token_file import TOKEN_FILE_ENV

MODEL = Model(stored_model)
MODEL_HELP = ("The model: B0, B3, B7, ViT-B16 or GPT2-small; another model by the name "
              "its runs record, or by its fingerprint (8 or more hex digits).")
# How a person sets the collector's address and token on the command line.
SET_ADDRESS = f"--collector HOST:PORT or ${ADDRESS_ENV}"
SET_TOKEN = f"--token-file FILE or ${TOKEN_ENV}"


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
    if ctx.params.get("token_file"):
        token = given_by(ctx, "token_file", "--token-file", TOKEN_FILE_ENV)
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
