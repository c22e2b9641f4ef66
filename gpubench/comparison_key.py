"""The comparison key: every dimension in which two runs must agree to be "like for like".

Two runs are compared (`gpubench compare`, the collector's Compare, its outlier groups,
the agent's after-run table, `gpubench estimate` and `fit`) only where they agree in
every dimension below: each changes what was timed (docs/protocol.md, "The comparison
key"). This table is the one definition; everything that keeps runs apart loops over
it: the runs table's columns and the outlier groups, Compare's pins (CompareRequest),
its answer (CompareResponse), the leaderboard's entries, `gpubench compare`'s flags,
the frames' columns, the tables' words and the site's form.

A dimension's `name` is at once the runs-table column, the field of CompareRequest,
CompareResponse and LeaderboardEntry, and the frames' column.

Why each: a model other than the EfficientNets is its fingerprint (the SHA-256 of its
architecture, gpubench.models): two models of one name may differ, and a model's runs
compare only with its own; the unit (images or tokens a second) follows the model. The
epoch-2 time depends on the image size and on how many images an epoch
trains on (a smoke run with --limit-images has fewer), so both must agree as much as
the software does. So must the settings (record.settings_label): the torch backend's
own kernels or data kept on the device make a run up to 4x faster than Keras's code
path ("keras"). And the batch rule: the largest batch that fits trains faster than the
"steps" rule's smaller one. And the pipeline as it ran: "seed" decodes the PNGs inside
the epoch, "streaming" (a cached run whose images did not fit the host) reads them from
disk every epoch. And the weights, the data (another folder is other images, maybe
other sizes) and the number of epochs. And the math mode (Config.math_mode): float32
convolutions and matrix products on TF32 tensor cores run several times faster than in
full float32, and torch's own defaults (TF32 convolutions only) are neither. A
--memory-limit is not a dimension: such runs are a GPU configuration of their own.

No gRPC and no pandas: the agent, the collector and the client all read it. It reads
a run's values through gpubench.record (the protobuf record), nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpubench import models, record
from gpubench.v1 import run_pb2

# A dimension's value: text, or a count (0: unrecorded, or "any" in a pin).
Value = str | int

# Words the flags' help and the collector's refusals share.
SETTINGS_WORDS = (
    '"keras" (Keras\'s own code path, as every TensorFlow run and older torch runs), or '
    "the options that were on, joined with '+' in this order: \"kernels\" (the torch "
    "backend's batched augmentation, fused batch norm and channels-first layout, each "
    'named alone when not all three are on), "data-on-device", "jit", "cuda-graphs"; e.g. '
    '"kernels+data-on-device+cuda-graphs"'
)
SETTINGS_CHOICES_WORDS = (
    "\"keras\", or the options on joined with '+' in this order: kernels, "
    + ", ".join(name for _, name in record.SETTINGS_OPTIONS)
    + '; e.g. "kernels+data-on-device"'
)
BATCH_RULE_WORDS = (
    "how the batch was chosen: steps (the default run: the largest power of two that fits "
    "with 8 steps an epoch), largest (--batch largest), given (--batch N), quick (--quick)"
)

# How the leaderboard treats a dimension (collector.aggregates.Aggregates.leaderboard):
ENTRY = "entry"  # each value its own entry (LeaderboardEntry carries it)
STANDARD = "standard"  # the standard benchmark's value only (record.STANDARD_TRAIN_IMAGES, ...)
RANKED = "ranked"  # one value at a time: the request's, else a default (LeaderboardResponse)


@dataclass(frozen=True)
class Dimension:
    """One dimension of the comparison key."""

    name: str  # the column, the wire field, the frame column ("batch_rule")
    words: str  # in a title, a legend or a refusal ("batch rule")
    numeric: bool  # a count: 0 means any (a pin) or mixed (an answer), "" otherwise
    of: Callable[[run_pb2.Run], Value]  # the run's value
    help: str  # the `gpubench compare` flag's help
    # The values a pin may take (empty: any text, or any count >= 1); `choices_words`
    # says them in a refusal where listing them would not help.
    choices: tuple[str, ...] = ()
    choices_words: str = ""
    # The flag's click type is a choice of `choices` (False: free text checked by the
    # collector, for choices too many to list).
    listed: bool = True
    metavar: str = ""
    leaderboard: str = ENTRY
    # A STANDARD dimension's value for a model (its native image size, ...).
    standard: Callable[[str], Value] | None = None
    leaderboard_help: str = ""  # the `gpubench leaderboard` flag's help (no flag: empty)
    leaderboard_default: Value = ""  # a RANKED one's value when none is asked for
    # Its label on the site's comparison form ("": not on the form; a refusal then
    # points to the command line's flag).
    form_label: str = ""
    # Whether `gpubench estimate` and `fit` keep runs apart by it (stored_runs.Setup).
    setup: bool = True
    # How a table's title says a shared value ("batch {}": "batch steps"); the title
    # names the benchmark version last, after how the runs ran.
    title: str = "{}"
    title_last: bool = False
    # A value the title leaves unsaid (the usual one: a speed in images a second).
    title_unless: Value = ""

    @property
    def flag(self) -> str:
        """The command line's flag that pins it: "--batch-rule"."""
        return "--" + self.name.replace("_", "-")

    @property
    def empty(self) -> Value:
        """Its empty value: 0 for a count, "" for text (no pin; unrecorded)."""
        return 0 if self.numeric else ""

    @property
    def sql_type(self) -> str:
        """Its runs-table column's type in DuckDB's words."""
        return "INTEGER" if self.numeric else "VARCHAR"


DIMENSIONS: tuple[Dimension, ...] = (
    Dimension("model_fingerprint", "model fingerprint", False,
              lambda run: run.config.model_fingerprint,
              "Only runs of the model of this fingerprint (the SHA-256 of its architecture, "
              "which a run of a model other than B0, B3 and B7 records; its first 8 or more "
              "hex digits do too, as --model).",
              metavar="SHA256", form_label="Model fingerprint", title="model {:.12}"),
    Dimension("unit", "unit", False,
              lambda run: models.unit_of(run.config.model, run.config.unit),
              "Only runs whose speed counts this: images, or tokens (a language model).",
              choices=models.UNITS, title="{} a second", title_unless=models.IMAGES),
    Dimension("benchmark_version", "benchmark version", False,
              lambda run: run.benchmark_version,
              "Only runs of this benchmark version.", metavar="VERSION",
              leaderboard=RANKED,
              leaderboard_help="Rank the runs of this benchmark version (default: the newest "
                               "with runs, in numeric order).",
              title="benchmark {}", title_last=True),
    Dimension("backend", "backend", False, lambda run: run.software.backend,
              "Only runs on this Keras backend.", choices=record.BACKENDS,
              leaderboard_help="Only runs on this Keras backend.", form_label="Backend"),
    Dimension("precision", "precision", False, lambda run: run.config.precision,
              "Only runs at this precision.", choices=record.PRECISIONS,
              leaderboard_help="Only runs at this precision.", form_label="Precision"),
    Dimension("math_mode", "math mode", False, lambda run: run.config.math_mode,
              "Only runs whose float32 convolutions and matrix products ran so: tf32 (TF32 "
              "tensor cores, the default), float32 (full float32), or where they differed "
              "tf32-convolutions (torch's own defaults) or tf32-matmuls.",
              choices=record.RECORDED_MATH_MODES, title="math {}",
              title_unless=record.RECORDED_MATH_MODES[0]),
    Dimension("image_size", "image size", True, lambda run: run.config.image_size,
              "Only runs at this image size (px).", leaderboard=STANDARD,
              standard=lambda model: (record.NATIVE_IMAGE_SIZE.get(model)
                                      or models.STANDARD_IMAGE_SIZE.get(model, 0)),
              title="{} px"),
    Dimension("train_images", "training images", True, lambda run: run.config.train_images,
              "Only runs with N training images an epoch, as runs record them; pins "
              "comparisons to one dataset size (the benchmark's training set has 1709, a "
              "quick check with gpubench-agent --train-images fewer).",
              metavar="N", leaderboard=STANDARD,
              standard=lambda model: record.STANDARD_TRAIN_IMAGES,
              # estimate scales a run's epoch-2 time by the images asked for over the
              # images it trained on: runs of other sizes answer alike.
              setup=False, title="{} training images"),
    Dimension("settings", "settings", False, lambda run: record.settings_label(run.config),
              "Only runs computed and fed this way: " + SETTINGS_WORDS + ".",
              choices=tuple(sorted(record.SETTINGS_LABELS)), listed=False, metavar="TEXT",
              choices_words=SETTINGS_CHOICES_WORDS, leaderboard=RANKED,
              leaderboard_default=record.DEFAULT_SETTINGS,
              leaderboard_help="Rank the runs computed and fed this way (one at a time): "
                               + SETTINGS_WORDS + ".",
              form_label="Settings", title="settings {}"),
    Dimension("batch_rule", "batch rule", False, lambda run: record.batch_rule(run.config),
              "Only runs whose batch rule is this: " + BATCH_RULE_WORDS + ".",
              choices=record.BATCH_RULES, leaderboard=RANKED,
              leaderboard_default=record.DEFAULT_BATCH_RULE,
              leaderboard_help="Rank the runs of this batch rule: " + BATCH_RULE_WORDS
                               + ".",
              form_label="Batch rule", title="batch {}"),
    Dimension("pipeline", "pipeline", False, lambda run: record.pipeline_as_run(run.config),
              "Only runs whose input pipeline ran this way (a cached run that streamed its "
              "images from disk is \"streaming\"; \"seed\" decodes them in the epoch).",
              choices=record.PIPELINE_MODES, form_label="Pipeline", title="pipeline {}"),
    Dimension("weights", "weights", False, lambda run: run.config.weights,
              'Only runs that started from these weights: "none", "imagenet" or '
              '"file:<sha256>".', metavar="TEXT", title="weights {}"),
    Dimension("data", "data", False, lambda run: record.data_label(run.config),
              'Only runs on this data: "synthetic-rps", or a folder\'s files as "sha256:" and '
              "the first 16 hex digits of their fingerprint.", metavar="TEXT", title="data {}"),
    Dimension("epochs", "epochs", True, lambda run: run.config.epochs,
              "Only runs of this many epochs.",
              # The epoch-2 time is one epoch's, whatever the count; estimate multiplies
              # it by the epochs asked for.
              setup=False, title="{} epochs"),
)

NAMES: tuple[str, ...] = tuple(d.name for d in DIMENSIONS)
BY_NAME: dict[str, Dimension] = {d.name: d for d in DIMENSIONS}
# In words, as a list: "benchmark version, backend, ..., data or epochs".
WORDS_LIST = ", ".join(d.words for d in DIMENSIONS[:-1]) + " or " + DIMENSIONS[-1].words


class Key(Mapping[str, Value]):
    """A run's value in some dimensions (all of them unless `only`), by name, in
    DIMENSIONS' order: hashable and ordered (as the tuple of its values), so that it
    groups and sorts runs; `key.backend` reads like `key["backend"]`."""

    __slots__ = ("_values",)
    _values: dict[str, Value]

    def __init__(self, values: Mapping[str, Value]) -> None:
        unknown = set(values) - set(NAMES)
        if unknown:
            raise KeyError(f"not a dimension of the comparison key: {', '.join(sorted(unknown))}")
        object.__setattr__(self, "_values", {n: values[n] for n in NAMES if n in values})

    def __getitem__(self, name: str) -> Value:
        return self._values[name]

    def __getattr__(self, name: str) -> Value:
        if name.startswith("_"):  # not a dimension (and _values not yet set: a copy)
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    # Immutable: a copy is the key itself; pickled as its values.
    def __copy__(self) -> Key:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Key:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (Key, (dict(self._values),))

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __hash__(self) -> int:
        return hash(tuple(self._values.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Key) and self._values == other._values

    def __lt__(self, other: Key) -> bool:
        return tuple(self._values.values()) < tuple(other._values.values())

    def __repr__(self) -> str:
        return f"Key({self._values!r})"

    def only(self, names: tuple[str, ...]) -> Key:
        """This key in the dimensions `names` only."""
        return Key({n: v for n, v in self._values.items() if n in names})


def values_of(run: run_pb2.Run) -> dict[str, Value]:
    """The run's value in every dimension, by name, as a plain dict: what key_of holds
    (the runs-table row takes this, made for every submission)."""
    return {d.name: d.of(run) for d in DIMENSIONS}


def key_of(run: run_pb2.Run) -> Key:
    """The run's comparison key: its value in every dimension, as the collector files it
    (a record of schema 1 reads its batch rule from its batch_choice, the pipeline is
    the one that ran)."""
    return Key(values_of(run))


def pins_of(message: Any) -> dict[str, Value]:
    """The dimensions' values `message` (a CompareRequest or CompareResponse, anything
    with a field per dimension) holds, by name."""
    return {d.name: getattr(message, d.name) for d in DIMENSIONS}


def shown(values: tuple[Any, ...] | list[Any]) -> str:
    """A dimension's values in words: "torch, tensorflow"; "" reads "unrecorded"."""
    return ", ".join(str(v) if v != "" else "unrecorded" for v in values)


# The dimensions the leaderboard ranks one value at a time, those pinned to the standard
# benchmark, and those each entry carries (an entry per value).
RANKED_DIMENSIONS = tuple(d.name for d in DIMENSIONS if d.leaderboard == RANKED)
STANDARD_DIMENSIONS = tuple(d.name for d in DIMENSIONS if d.leaderboard == STANDARD)
ENTRY_DIMENSIONS = tuple(d.name for d in DIMENSIONS if d.leaderboard == ENTRY)
# In the order a title names them.
TITLE_ORDER = tuple(sorted(DIMENSIONS, key=lambda d: d.title_last))
# Those `gpubench estimate` and `fit` group runs by (stored_runs.Setup).
SETUP_DIMENSIONS = tuple(d.name for d in DIMENSIONS if d.setup)


def standard_value(name: str, model: str) -> Value:
    """The standard benchmark's value of a STANDARD dimension for `model` (the
    leaderboard's: its native image size, the protocol's training images)."""
    standard = BY_NAME[name].standard
    if standard is None:
        raise KeyError(f"{name}: no standard value")
    return standard(model)
