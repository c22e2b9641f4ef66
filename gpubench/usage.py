"""click's usage errors said as every gpubench command says its errors: one message,
wrapped at the output's width, naming the --help that lists the flags; exit 2.

click's own text ("Usage: ...", "Try '... -h' for help.", "Error: Invalid value for
'--models': ...") is a line of up to 190 columns; `gpubench`, `gpubench-agent` and
`gpubench-collector` all say it this way instead.
"""

from __future__ import annotations

import re
from typing import IO, Any

import click

from gpubench.errors import ExitCode, wrap_message


def usage_message(error: click.UsageError, program: str) -> str:
    """`error` in this project's words ("--models: ...", a lower-case start, no final
    stop) and the --help to read (that of `error`'s command, else `program --help`)."""
    said = error.format_message()
    if isinstance(error, click.BadParameter) and not isinstance(error, click.MissingParameter):
        # "Invalid value for '--models': ..." is said "--models: ...".
        said = re.sub(r"^Invalid value for '([^']+)': ", r"\1: ", said)
    said = said.rstrip(".")
    if said[1:2].islower():  # "Missing option" is said "missing option", as every error
        said = said[0].lower() + said[1:]
    where = f"{error.ctx.command_path} --help" if error.ctx else f"{program} --help"
    return f"{said} (see {where})"


def example(command: str) -> str:
    """A command's help epilog: one example of it, kept on its own lines as click lays
    the help out (its "\\b" marker)."""
    return f"\b\nExample:\n  {command}"


class UsageFailed(click.ClickException):
    """A usage error said as `usage_message` says it, after `prefix`; exit 2."""

    exit_code = ExitCode.USAGE

    def __init__(self, error: click.UsageError, program: str, prefix: str) -> None:
        super().__init__(usage_message(error, program))
        self.prefix = prefix

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(wrap_message(self.prefix, self.format_message()), err=True, file=file)


class FriendlyGroup(click.Group):
    """A click group whose usage errors (its own options', a command's, no such command)
    are one wrapped message, `PROGRAM: error: ...`, exit 2. A group given no command
    (click shows its help) is left as it is."""

    program = "gpubench"
    prefix = "gpubench: error: "  # what the program's other errors start with

    def _said(self, error: click.UsageError) -> click.ClickException:
        if isinstance(error, getattr(click.exceptions, "NoArgsIsHelpError", ())):
            return error  # click >= 8.2: the help, as asked
        return UsageFailed(error, self.program, self.prefix)

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: object) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)  # type: ignore[arg-type]
        except click.UsageError as exc:
            raise self._said(exc) from None

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise self._said(exc) from None
