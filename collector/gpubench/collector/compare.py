"""The comparison's arithmetic: like-with-like checks, the baseline, speedups, memory shares.

The store aggregates each GPU configuration's runs (medians, minima, maxima over
OK runs, outliers left out unless asked); this module turns those per-group
figures into a comparison. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpubench.collector.errors import MixedRuns

from gpubench.errors import NotFound
from gpubench.record import gpu_config_name, normalize_gpu_name

# pyperf warns when a result looks unstable; so do we.
FEW_RUNS = 3
WIDE_SPREAD = 0.10  # (max - min) / median of the epoch-2 times
MIXED = "mixed"


@dataclass(frozen=True)
class GroupFigures:
    """Aggregated figures of one GPU configuration's runs (medians are the medians of
    each submitter's medians: one submitter, one voice)."""

    gpu_name: str
    gpu_count: int
    runs: int
    outliers_excluded: int
    epoch2_median_seconds: float
    epoch2_min_seconds: float
    epoch2_max_seconds: float
    train_images_per_second_median: float | None
    max_batch_per_gpu: int
    max_global_batch: int
    peak_memory_median_bytes: float | None  # per GPU, framework allocator
    memory_total_bytes: float | None  # the card's memory
    energy_per_epoch_median_joules: float | None
    images_per_joule_median: float | None
    benchmark_versions: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()
    precisions: tuple[str, ...] = ()
    image_sizes: tuple[int, ...] = ()
    train_images: tuple[int, ...] = ()  # training images per epoch (the dataset's size)
    settings: tuple[str, ...] = ()  # record.settings_label: "keras", "kernels", ...
    batch_rules: tuple[str, ...] = ()  # how the batch was chosen: "steps", "largest", ...
    pipelines: tuple[str, ...] = ()  # as they ran: "cached", "seed", ...
    weights: tuple[str, ...] = ()
    data_sets: tuple[str, ...] = ()  # record.data_label: "synthetic-rps", "sha256:..."
    epochs: tuple[int, ...] = ()
    # The memory answer: the largest batch per GPU a search confirmed (0: no search).
    largest_batch_per_gpu_max: int = 0
    memory_limit_bytes: int = 0  # --memory-limit: the runs behaved as a card this size
    flagged_included: int = 0  # runs flagged implausible among `runs` (asked for)
    source: str = ""  # published runs: where the figures come from
    submitters: int = 0  # the submitters (tokens) whose runs `runs` are

    @property
    def config_name(self) -> str:
        """'2x NVIDIA RTX 6000 Ada Generation', 'CPU', '1x NVIDIA H200 as 16 GiB', ..."""
        return gpu_config_name(self.gpu_name, self.gpu_count, self.memory_limit_bytes)


@dataclass(frozen=True)
class ComparedGroup:
    """One GPU configuration in a comparison."""

    figures: GroupFigures
    speedup: float
    is_baseline: bool
    peak_memory_share: float | None
    # A comparison of unlike runs (allow_mixed): how this group ran in each dimension
    # the groups differ in ("settings kernels+cuda-graphs", ...).
    differences: tuple[str, ...] = ()


@dataclass(frozen=True)
class PublishedGroup:
    """Published runs of one GPU configuration, shown beside a comparison (not in it)."""

    figures: GroupFigures
    differences: tuple[str, ...]  # how they were made unlike the compared runs


@dataclass(frozen=True)
class Comparison:
    """The answer to "how much faster is each GPU configuration than the baseline?"."""

    model: str
    baseline: str
    groups: tuple[ComparedGroup, ...]  # fastest first
    warnings: tuple[str, ...]
    benchmark_version: str
    backend: str
    precision: str
    image_size: int  # 0 when mixed
    train_images: int = 0  # training images per epoch; 0 when mixed
    settings: str = ""  # how the network was computed and fed: "keras", "kernels", ...
    batch_rule: str = ""  # how the batch was chosen: "steps", "largest", "given", "quick"
    pipeline: str = ""  # as it ran
    weights: str = ""
    data: str = ""
    epochs: int = 0  # 0 when mixed
    published: tuple[PublishedGroup, ...] = ()


# The dimensions that must agree, with the `gpubench compare` flag that pins each
# (docs/protocol.md, "The comparison key"). The epoch-2 time depends on the image size
# and on how many images an epoch trains on (a smoke run with --limit-images has fewer),
# so both must agree as much as the software does. So must the settings
# (record.settings_label): the torch backend's own kernels or data kept on the device
# make a run up to 4x faster than Keras's code path ("keras"). And the batch rule: the
# largest batch that fits trains faster than the "steps" rule's smaller one. And the
# pipeline as it ran: "seed" decodes the PNGs inside the epoch, "streaming" (a cached
# run whose images did not fit the host) from disk every epoch. And the weights, the
# data (another folder is other images, maybe other sizes) and the number of epochs.
# A --memory-limit is not a dimension: such runs are a GPU configuration of their own.
DIMENSIONS = (
    ("benchmark_version", "benchmark_versions", "--benchmark-version"),
    ("backend", "backends", "--backend"),
    ("precision", "precisions", "--precision"),
    ("image_size", "image_sizes", "--image-size"),
    ("train_images", "train_images", "--train-images"),
    ("settings", "settings", "--settings"),
    ("batch_rule", "batch_rules", "--batch-rule"),
    ("pipeline", "pipelines", "--pipeline"),
    ("weights", "weights", "--weights"),
    ("data", "data_sets", "--data"),
    ("epochs", "epochs", "--epochs"),
)
# GroupFigures' attribute of each dimension, in DIMENSIONS' order.
DIMENSION_ATTRIBUTES = tuple(attribute for _, attribute, _ in DIMENSIONS)
# Dimensions counted in integers: these read 0, not "mixed", when they differ.
_NUMERIC = {"image_size", "train_images", "epochs"}


def _values(groups: list[GroupFigures], attribute: str) -> list[object]:
    return sorted({v for g in groups for v in getattr(g, attribute)}, key=str)


def mixed_dimensions(groups: list[GroupFigures]) -> list[str]:
    """The dimensions (DIMENSIONS' names, in its order) in which the groups' runs differ."""
    return [dimension for dimension, attribute, _ in DIMENSIONS
            if len(_values(groups, attribute)) > 1]


def shared_settings(
    model: str, groups: list[GroupFigures], *, allow_mixed: bool
) -> dict[str, str | int]:
    """What all groups' runs share per dimension; MixedRuns names any that differ.

    With allow_mixed a differing dimension reads "mixed" (0 for image_size and
    train_images) instead.
    """
    shared: dict[str, str | int] = {}
    mixed: list[str] = []
    for dimension, attribute, flag in DIMENSIONS:
        numeric = dimension in _NUMERIC
        values = _values(groups, attribute)
        if len(values) <= 1:
            shared[dimension] = values[0] if values else (0 if numeric else "")
            continue
        shared[dimension] = 0 if numeric else MIXED
        shown = ", ".join(str(v) if v != "" else "unrecorded" for v in values)
        mixed.append(f"{dimension} ({shown}; pin one with {flag})")
    if mixed and not allow_mixed:
        raise MixedRuns(
            f"the {model} runs differ in {'; '.join(mixed)}; or compare them anyway with "
            "allow_mixed (--allow-mixed)"
        )
    return shared


def choose_baseline(
    groups: list[GroupFigures], gpu_name: str = "", gpu_count: int = 0
) -> GroupFigures:
    """The group named (GPU name, case-insensitive, and count, default 1; the whole card
    before one with a --memory-limit), else the slowest."""
    if not groups:
        raise NotFound("no runs to compare")
    if not gpu_name:
        return max(groups, key=lambda g: (g.epoch2_median_seconds, g.config_name))
    count = gpu_count or 1
    wanted = normalize_gpu_name(gpu_name).lower()
    for group in sorted(groups, key=lambda g: g.memory_limit_bytes):
        if group.gpu_name.lower() == wanted and group.gpu_count == count:
            return group
    found = ", ".join(sorted(g.config_name for g in groups))
    raise NotFound(
        f"baseline_gpu: no runs of {gpu_config_name(gpu_name, count)} to compare against "
        f"(found: {found})"
    )


def speedup(baseline_seconds: float, group_seconds: float) -> float:
    """How many times faster a group is than the baseline (by median epoch-2 time)."""
    return baseline_seconds / group_seconds


def memory_share(figures: GroupFigures) -> float | None:
    """The group's peak memory as a share of the memory its runs had, 0..1: their
    --memory-limit where they ran with one (a run as a 16 GiB card is measured against
    16 GiB, not the card it ran on), else the card's; None when either is unknown."""
    had = figures.memory_limit_bytes or figures.memory_total_bytes
    if not figures.peak_memory_median_bytes or not had:
        return None
    return figures.peak_memory_median_bytes / had


def group_warnings(group: GroupFigures) -> list[str]:
    """Why a group's figures may not be trustworthy."""
    found = []
    name = group.config_name
    if group.runs < FEW_RUNS:
        found.append(f"{name}: only {group.runs} run(s); the median is shaky below {FEW_RUNS}")
    spread = (group.epoch2_max_seconds - group.epoch2_min_seconds) / group.epoch2_median_seconds
    if spread > WIDE_SPREAD:
        found.append(
            f"{name}: epoch-2 times spread {spread:.0%} of the median "
            f"({group.epoch2_min_seconds:.3g}-{group.epoch2_max_seconds:.3g} s)"
        )
    if group.outliers_excluded:
        found.append(f"{name}: {group.outliers_excluded} outlier run(s) left out")
    if group.flagged_included:
        found.append(f"{name}: {group.flagged_included} run(s) flagged as implausible included "
                     "(--include-flagged)")
    return found


def _shown(values: tuple[object, ...]) -> str:
    return ", ".join(str(v) for v in values if v != "") or "unrecorded"


def own_values(group: GroupFigures, mixed: Sequence[str]) -> tuple[str, ...]:
    """How a group of a comparison of unlike runs ran in the `mixed` dimensions (those
    the groups differ in): "settings kernels+cuda-graphs", "batch rule steps", ..."""
    return tuple(f"{dimension.replace('_', ' ')} {_shown(getattr(group, attribute))}"
                 for dimension, attribute, _ in DIMENSIONS if dimension in mixed)


def differences(published: GroupFigures, shared: dict[str, str | int]) -> tuple[str, ...]:
    """How published runs were made unlike the compared runs: "backend tensorflow",
    "pipeline seed", ... for each dimension whose value the compared runs share and the
    published runs do not."""
    found = []
    for dimension, attribute, _ in DIMENSIONS:
        theirs = getattr(published, attribute)
        ours = shared.get(dimension)
        if ours in (None, "", 0, MIXED) or theirs == (ours,):
            continue
        found.append(f"{dimension.replace('_', ' ')} {_shown(theirs)}")
    return tuple(found)


def compare(
    model: str,
    groups: list[GroupFigures],
    *,
    baseline_gpu: str = "",
    baseline_gpu_count: int = 0,
    allow_mixed: bool = False,
    published: Sequence[GroupFigures] = (),
) -> Comparison:
    """Compare GPU configurations against a baseline, fastest first; published runs of
    the model (their own groups) come beside it, with how they differ."""
    groups = [g for g in groups if g.runs > 0]
    if not groups:
        return Comparison(
            model, "", (), (f"no OK runs of {model} match",), "", "", "", 0, 0, "", "",
            published=tuple(PublishedGroup(g, ()) for g in published),
        )
    shared = shared_settings(model, groups, allow_mixed=allow_mixed)
    mixed = mixed_dimensions(groups)
    baseline = choose_baseline(groups, baseline_gpu, baseline_gpu_count)
    ordered = sorted(groups, key=lambda g: (g.epoch2_median_seconds, g.config_name))
    compared = tuple(
        ComparedGroup(
            figures=g,
            speedup=speedup(baseline.epoch2_median_seconds, g.epoch2_median_seconds),
            is_baseline=g is baseline,
            peak_memory_share=memory_share(g),
            differences=own_values(g, mixed),
        )
        for g in ordered
    )
    warnings = tuple(w for g in ordered for w in group_warnings(g))
    return Comparison(
        model=model,
        baseline=baseline.config_name,
        groups=compared,
        warnings=warnings,
        benchmark_version=str(shared["benchmark_version"]),
        backend=str(shared["backend"]),
        precision=str(shared["precision"]),
        image_size=int(shared["image_size"]),
        train_images=int(shared["train_images"]),
        settings=str(shared["settings"]),
        batch_rule=str(shared["batch_rule"]),
        pipeline=str(shared["pipeline"]),
        weights=str(shared["weights"]),
        data=str(shared["data"]),
        epochs=int(shared["epochs"]),
        published=tuple(PublishedGroup(g, differences(g, shared)) for g in published),
    )
