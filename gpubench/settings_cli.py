"""The run settings as click options, for the workload's and the agent's command lines.

Both are made from the one schema (gpubench.settings.SETTINGS): the workload's
options carry the schema's defaults; the agent's default to None ("the
workload's default") so that only what the user gave is passed on.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import click

from gpubench import models
from gpubench.errors import GpubenchError
from gpubench.settings import (
    DEPRECATED_BATCH_WORDS,
    MODELS,
    RULE_STEPS,
    BadSettings,
    RunSettings,
    Setting,
    default_backend,
    offered_by_agent,
    parse_batch,
    parse_size,
    taken_by,
)

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


class Parsed(click.ParamType):
    """A value read by one of gpubench.settings' parsers; its BadSettings becomes
    click's usage error, naming the option."""

    def __init__(self, name: str, parse: Callable[[str], Any]) -> None:
        self.name = name
        self._parse = parse

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if not isinstance(value, str):
            return value  # a default, already parsed
        try:
            return self._parse(value)
        except GpubenchError as exc:
            self.fail(str(exc), param, ctx)


def model_name(text: str) -> str:
    """A model as --model names it (gpubench.models): a standard workload given in any
    case, as the project names it (B0, ViT-B16); else a keras.applications name, a
    .keras file or file.py:function as given; else BadSettings saying what it takes."""
    name = text.strip()
    standard = {m.upper(): m for m in models.STANDARD_MODELS}
    if name.upper() in standard:
        return standard[name.upper()]
    try:
        models.kind_of(name)
    except ValueError as exc:
        raise BadSettings(str(exc)) from None
    return name


def stored_model(text: str) -> str:
    """A model as the collector's queries take it: a standard workload in any case (as
    the project names it), a custom model's recorded name, or a model fingerprint (its
    first 8 or more hex digits); else BadSettings."""
    name = text.strip()
    standard = {m.upper(): m for m in models.STANDARD_MODELS}
    if name.upper() in standard:
        return standard[name.upper()]
    if models.is_missing_efficientnet(name):
        raise BadSettings(models.missing_efficientnet(name))
    if models.is_fingerprint(name.lower()):
        return name.lower()
    if models.is_record_name(name):
        return name
    raise BadSettings(f"{name!r}: give {', '.join(models.STANDARD_MODELS)}, a model's name as "
                      "its runs record it, or a model fingerprint")


def model_names(text: str) -> list[str]:
    """A comma list of models (model_name), each once, in the order given."""
    names = [model_name(part) for part in text.split(",") if part.strip()]
    if not names:
        raise BadSettings(f"{text!r}: give a model ({', '.join(MODELS)}, ...), or a comma "
                          "list of them")
    return list(dict.fromkeys(names))


class Model(Parsed):
    """A model (B0, B3, B7; any case), or with `model_names` a comma list of them, named
    in --help and in its errors as the protocol names them."""

    def __init__(self, parse: Callable[[str], Any] = model_name) -> None:
        super().__init__("model", parse)
        self._metavar = "B0,B3,..." if parse is model_names else "MODEL"

    def get_metavar(self, param: Any, ctx: Any = None) -> str:  # click < 8.2 passes no ctx
        return self._metavar


class _Batch(Parsed):
    """--batch: parse_batch's (size, rule); a deprecated spelling is said on stderr."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in DEPRECATED_BATCH_WORDS:
            word = value.strip().lower()
            click.echo(f"warning: --batch {word} is deprecated: it is --batch "
                       f"{DEPRECATED_BATCH_WORDS[word]} now, the rule's name in the record",
                       err=True)
        return super().convert(value, param, ctx)


def BatchSize() -> Parsed:  # noqa: N802 - used as a click type, as click.Choice is
    """A batch size and how it is chosen: N (given), 'steps' (the speed rule) or
    'largest'."""
    return _Batch("N|steps|largest", parse_batch)


def Size() -> Parsed:  # noqa: N802
    """A size in bytes: 16GiB, 8GB, 12000MiB or a plain number of bytes."""
    return Parsed("SIZE", parse_size)


def _click_type(setting: Setting) -> Any:
    if setting.kind == "choice":
        return click.Choice(setting.choices)
    if setting.kind == "size":
        return Size()
    if setting.kind == "batch":
        return BatchSize()
    if setting.kind == "int":
        return click.IntRange(min=int(setting.minimum)) if setting.minimum is not None else int
    if setting.kind == "float":
        return click.FloatRange(min=setting.minimum) if setting.minimum is not None else float
    return str


def _option(name: str, setting: Setting, *, default: Any, show_default: Any,
            help_text: str) -> Decorator:
    declarations = [f"{setting.flag}/{setting.off_flag}" if setting.off_flag else setting.flag,
                    name]
    return click.option(*declarations, type=None if setting.off_flag else _click_type(setting),
                        default=default, show_default=show_default, hidden=setting.hidden,
                        help=help_text)


def _apply(options: list[Decorator]) -> Decorator:
    """Apply click options in the order written (the first is listed first in --help)."""

    def apply(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


def workload_options(command: str, *, leave_out: tuple[str, ...] = ()) -> Decorator:
    """The options of the workload's `command` ("run", "trial", "search"), with the
    schema's defaults (the backend's: $KERAS_BACKEND, else tensorflow)."""
    defaults = RunSettings.__dataclass_fields__
    options = []
    for name, setting in taken_by(command).items():
        if name in leave_out:
            continue
        default = defaults[name].default
        shown: Any = default is not None
        if name == "backend":
            default, shown = default_backend, "KERAS_BACKEND, else tensorflow"
        if setting.kind == "batch":  # no size: the default rule chooses it
            default, shown = RULE_STEPS, True
        options.append(_option(name, setting, default=default, show_default=shown,
                               help_text=setting.help))
    return _apply(options)


def agent_options(command: str, *, leave_out: tuple[str, ...] = ()) -> Decorator:
    """The settings the agent's `command` ("run", "largest-batch") offers, each default
    None: only what the user gives is passed to the workload. The on/off switches are
    hidden, kept for one release: --settings LABEL gives them all (label_switches)."""
    defaults = RunSettings.__dataclass_fields__
    options = []
    for name, setting in offered_by_agent(command).items():
        if name in leave_out:
            continue
        default = setting.agent_default or defaults[name].default
        if isinstance(default, bool):
            default = "on" if default else "off"
        if setting.off_flag:
            setting = replace(setting, hidden=True)
        options.append(_option(name, setting, default=None, show_default=False,
                               help_text=f"{setting.help} [default: {default}]"))
    return _apply(options)


# -- the record's settings label (gpubench.record.settings_label) as the agent takes it ---

LABEL_HELP = (
    "How the network is computed and fed, as the record's settings label names it and "
    "gpubench compare --settings pins it: keras (Keras's own code path), or the options "
    "on joined by +: kernels (torch: batched augmentation, fused batch norm, channels "
    "first), data-on-device (torch), jit (XLA, torch.compile), cuda-graphs (torch, one "
    "GPU); e.g. kernels+cuda-graphs; docs/protocol.md says what each does [default: "
    "kernels+cuda-graphs with torch (cuda-graphs for models other than B0-B7), jit with "
    "jax, keras with tensorflow].")


def label_of(switches: Mapping[str, bool]) -> str:
    """The record's label of the switches' values (record.settings_label, the one
    definition: the wire code is read only when a label is asked for)."""
    from gpubench import record

    return record.settings_label(SimpleNamespace(**switches))  # type: ignore[arg-type]


def _every_label() -> dict[str, dict[str, bool]]:
    """Every settings label the record can give, with the switches that give it."""
    from gpubench import record

    names = [option for option, _ in record.SETTINGS_OPTIONS]
    found = {}
    for mask in range(1 << len(names)):
        switches = {name: bool(mask >> i & 1) for i, name in enumerate(names)}
        found[label_of(switches)] = switches
    return found


def label_switches(text: str) -> dict[str, bool]:
    """The switches (RunSettings fields) a settings label gives: each option it names on,
    every other off; its options in any order. Else BadSettings with the closest labels."""
    labels = _every_label()
    parts = {part.strip() for part in text.strip().lower().split("+")}
    for label, switches in labels.items():
        if set(label.split("+")) == parts:
            return switches
    close = difflib.get_close_matches(text.strip().lower(), sorted(labels), n=3)
    guess = f"; did you mean {' or '.join(close)}?" if close else ""
    raise BadSettings(f"{text!r} is not a settings label: keras, or the options on joined "
                      "by + (kernels, data-on-device, jit, cuda-graphs; each of the kernels "
                      f"alone: batched-augmentation, fused-batchnorm, channels-first){guess}")


def settings_label(values: Mapping[str, Any], model: str) -> str:
    """The settings label a run of `model` with `values` (RunSettings fields, defaults
    settled) records; "" where the settings are refused."""
    from gpubench import record

    fields = RunSettings.__dataclass_fields__
    try:
        settled = RunSettings(**{name: value for name, value in values.items()
                                 if name in fields and value is not None}, model=model)
    except GpubenchError:
        return ""
    return label_of({name: getattr(settled, name) for name, _ in record.SETTINGS_OPTIONS})


def Label() -> Parsed:  # noqa: N802 - used as a click type, as click.Choice is
    """A settings label, read as the switches it gives (label_switches)."""
    return Parsed("LABEL", label_switches)


def as_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """Click's values of the schema's options as RunSettings fields: --batch's (size, rule)
    gives `batch` and `batch_rule` (not given: neither, the defaults apply)."""
    found = dict(values)
    pair = found.pop("batch", None)
    if pair is not None:
        found["batch"], found["batch_rule"] = pair
    return found


def given_settings(values: dict[str, Any], command: str) -> dict[str, Any]:
    """Take the agent `command`'s setting values out of click's `values` (those given),
    as RunSettings fields (as_fields)."""
    return as_fields({name: value for name in offered_by_agent(command)
                      if (value := values.pop(name, None)) is not None})
