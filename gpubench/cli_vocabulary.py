"""The words the three commands (`gpubench`, `gpubench-agent`, `gpubench-collector`) share:
help laid out at 80 columns, an old flag's spelling kept one release and said, and the
options that mean one thing wherever they are taken: --gpu (GPUs by name),
--memory-limit (a GPU's memory, with its unit), --train-images (training images an
epoch).

Light on purpose: the agent's --help reads it and loads nothing heavy.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from gpubench import sizes
from gpubench.errors import wrap_message

# What a click option decorates, given back as it was (click.option's own typing).
Command = TypeVar("Command", bound=Callable[..., Any])

# Every command's and subcommand's context: -h as --help, help laid out at 80 columns
# whatever the terminal's width (narrower where the terminal is).
HELP_CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"],
                                "max_content_width": 80}


def say_renamed(program: str, old: str, new: str) -> None:
    """Say that `old`, the old spelling kept for one release, is now `new` (e.g.
    "--train-images 192"): to a person at a terminal, on stderr; a script's output stays
    as it was."""
    if sys.stderr.isatty():
        click.echo(wrap_message(f"{program}: note: ", f"{old} is now {new}; {old} goes in "
                                "the next release"), err=True)


def old_spelling(old: str, name: str, new: str, **option: Any
                 ) -> Callable[[Command], Command]:
    """A hidden option `old` whose value reaches the command as `name`, the old spelling
    of `new` kept for one release; the command says it (say_renamed) and uses it."""
    return click.option(old, name, hidden=True, help=f"The old spelling of {new}.", **option)


# -- --gpu ------------------------------------------------------------------------------

# The rule, said once (gpubench.stored_runs.names_gpu applies it).
GPU_RULE = ('A GPU by its whole name as NVML reports it and runs list shows it, any case: '
            '"Tesla T4", "NVIDIA H200"; a name no GPU with runs has is exit 5, naming the '
            'closest ("H200": did you mean NVIDIA H200?).')


def gpu_option(what: str, *, name: str = "gpu", multiple: bool = False
               ) -> Callable[[Command], Command]:
    """--gpu NAME, `what` it selects, then the rule every command applies."""
    return click.option("--gpu", name, metavar="NAME", multiple=multiple,
                        help=f"{what} {GPU_RULE}")


# -- --memory-limit ---------------------------------------------------------------------

MEMORY_SIZE = ("the GPU's memory with its unit, e.g. 16GiB, 16GB or 16000MiB (GiB is "
               "1024^3 bytes, GB 1000^3; a bare G is GiB), at least "
               f"{sizes.SMALLEST_CARD_GIB}GiB (the smallest card the benchmark knows)")


def card_memory(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A --memory-limit's bytes (gpubench.sizes.card_memory), each of several, or a
    usage error naming the flag and how to write it."""
    if value is None:
        return None
    try:
        if isinstance(value, tuple):  # repeated, each maybe a comma list
            return tuple(sizes.card_memory(part.strip()) for given in value
                         for part in given.split(",") if part.strip())
        return sizes.card_memory(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


# -- --train-images ---------------------------------------------------------------------

TRAIN_IMAGES = ("N training images an epoch (or samples: the language model's sequences), "
                "as runs record them and gpubench compare --train-images pins them")
