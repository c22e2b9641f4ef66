"""The access token as every command that sends one takes it: from the file
--token-file names ('-': stdin's first line) or the variable $GPUBENCH_TOKEN, never from
the command line, where every user of the machine reads it (`ps`)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

TOKEN_FILE_ENV = "GPUBENCH_TOKEN_FILE"
TOKEN_FILE_HELP = (f"Read the access token from FILE ('-': the first line of stdin) "
                   f"[env: {TOKEN_FILE_ENV}]; or give the token itself in $GPUBENCH_TOKEN. "
                   "Never on the command line, where other users read it from the process "
                   "list.")
TOKEN_IN_ARGV = ("--token puts the secret in the process list, where every user of this "
                 "machine reads it: use --token-file FILE ('-': stdin), or set GPUBENCH_TOKEN")


def token_from_file(token_file: str) -> str:
    """The token in `token_file` ('-': stdin's first line), or BadParameter naming the
    file and what is wrong with it."""
    try:
        text = sys.stdin.readline() if token_file == "-" else Path(token_file).read_text()
    except OSError as exc:
        raise click.BadParameter(f"{token_file}: cannot read it ({exc.strerror or exc})",
                                 param_hint="--token-file") from None
    found = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not found:
        where = "stdin" if token_file == "-" else token_file
        raise click.BadParameter(f"{where}: holds no token", param_hint="--token-file")
    return found


def say_token_in_argv(command: str) -> None:
    """`gpubench --token`, the old spelling kept for one release, still works: a person
    at a terminal is told the new one (a script's output stays as it was)."""
    if sys.stderr.isatty():
        click.echo(f"{command}: note: {TOKEN_IN_ARGV}", err=True)
