"""The comparison's arithmetic: like-with-like checks, the baseline, speedups, memory shares.

The store aggregates each GPU configuration's runs (medians, minima, maxima over
OK runs, outliers left out unless asked); this module turns those per-group
figures into a comparison. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpubench import comparison_key
from gpubench.collector.errors import MixedRuns
from gpubench.comparison_key import DIMENSIONS, Value
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
    # Each dimension of the comparison key (gpubench.comparison_key, by name): the
    # values among the group's runs, sorted ("settings": ("keras",), ...).
    values: Mapping[str, tuple[Value, ...]] = field(default_factory=dict)
    # The memory answer: the largest batch per GPU a search confirmed (0: no search).
    largest_batch_per_gpu_max: int = 0
    memory_limit_bytes: int = 0  # --memory-limit: the runs behaved as a card this size
    flagged_included: int = 0  # runs flagged implausible among `runs` (asked for)
    source: str = ""  # published runs: where the figures come from
    submitters: int = 0  # the submitters (tokens) whose runs `runs` are
    uncatalogued: bool = False  # a card not yet in the GPU catalogue: shown apart

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
    # What the compared runs share in each dimension of the comparison key (by name):
    # "mixed" (0 for a count) where allow_mixed let them differ.
    shared: Mapping[str, Value] = field(default_factory=dict)
    # The dimensions the compared groups differ in, with their values (allow_mixed).
    mixed: tuple[MixedDimension, ...] = ()
    published: tuple[PublishedGroup, ...] = ()
    # Configurations of cards not yet in the GPU catalogue, fastest first: apart from
    # `groups` (never the baseline), a speedup against the baseline where there is one,
    # and how they ran unlike the compared runs.
    uncatalogued: tuple[ComparedGroup, ...] = ()


@dataclass(frozen=True)
class MixedDimension:
    """A dimension of the comparison key in which the compared runs differ."""

    dimension: str  # its name (gpubench.comparison_key)
    values: tuple[Value, ...]  # sorted as text; "" is unrecorded

    @property
    def flag(self) -> str:
        """The `gpubench compare` flag that pins it."""
        return comparison_key.BY_NAME[self.dimension].flag


def _values(groups: list[GroupFigures], name: str) -> list[Value]:
    return sorted({v for g in groups for v in g.values.get(name, ())}, key=str)


def mixed_dimensions(groups: list[GroupFigures]) -> list[MixedDimension]:
    """The dimensions in which the groups' runs differ, in the key's order."""
    found = []
    for d in DIMENSIONS:
        values = _values(groups, d.name)
        if len(values) > 1:
            found.append(MixedDimension(d.name, tuple(values)))
    return found


def refusal(model: str, mixed: Sequence[MixedDimension]) -> MixedRuns:
    """The refusal to compare runs that differ in `mixed`: in words, each difference
    with the flag that pins it, and as data (MixedRuns.mixed)."""
    named = "; ".join(f"{m.dimension} ({comparison_key.shown(m.values)}; pin one with "
                      f"{m.flag})" for m in mixed)
    error = MixedRuns(f"the {model} runs differ in {named}; or compare them anyway with "
                      "allow_mixed (--allow-mixed)")
    error.mixed = tuple(mixed)
    return error


def shared_settings(
    model: str, groups: list[GroupFigures], *, allow_mixed: bool
) -> dict[str, Value]:
    """What all groups' runs share per dimension; MixedRuns names any that differ.

    With allow_mixed a differing dimension reads "mixed" (0 for a count) instead.
    """
    shared: dict[str, Value] = {}
    for d in DIMENSIONS:
        values = _values(groups, d.name)
        if len(values) <= 1:
            shared[d.name] = values[0] if values else d.empty
        else:
            shared[d.name] = 0 if d.numeric else MIXED
    mixed = mixed_dimensions(groups)
    if mixed and not allow_mixed:
        raise refusal(model, mixed)
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
        # The field and the flag that set it, as allow_mixed (--allow-mixed) is named.
        f"baseline_gpu (--baseline): no runs of {gpu_config_name(gpu_name, count)} to "
        f"compare against (found: {found})"
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


def own_values(group: GroupFigures, mixed: Sequence[MixedDimension]) -> tuple[str, ...]:
    """How a group of a comparison of unlike runs ran in the `mixed` dimensions (those
    the groups differ in): "settings kernels+cuda-graphs", "batch rule steps", ..."""
    names = {m.dimension for m in mixed}
    return tuple(f"{d.name.replace('_', ' ')} {_shown(group.values.get(d.name, ()))}"
                 for d in DIMENSIONS if d.name in names)


def differences(published: GroupFigures, shared: Mapping[str, Value]) -> tuple[str, ...]:
    """How published runs were made unlike the compared runs: "backend tensorflow",
    "pipeline seed", ... for each dimension whose value the compared runs share and the
    published runs do not."""
    found = []
    for d in DIMENSIONS:
        theirs = published.values.get(d.name, ())
        ours = shared.get(d.name)
        if ours in (None, "", 0, MIXED) or theirs == (ours,):
            continue
        found.append(f"{d.name.replace('_', ' ')} {_shown(theirs)}")
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
    the model (their own groups) come beside it, with how they differ, and so do the
    groups of cards not yet catalogued (GroupFigures.uncatalogued)."""
    apart = sorted((g for g in groups if g.runs > 0 and g.uncatalogued),
                   key=lambda g: (g.epoch2_median_seconds, g.config_name))
    groups = [g for g in groups if g.runs > 0 and not g.uncatalogued]
    if not groups:
        return Comparison(
            model, "", (), (f"no OK runs of {model} match",),
            shared={d.name: d.empty for d in DIMENSIONS},
            published=tuple(PublishedGroup(g, ()) for g in published),
            uncatalogued=tuple(ComparedGroup(g, 0.0, False, memory_share(g)) for g in apart),
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
    warnings = tuple(w for g in [*ordered, *apart] for w in group_warnings(g))
    return Comparison(
        model=model,
        baseline=baseline.config_name,
        groups=compared,
        warnings=warnings,
        shared=shared,
        mixed=tuple(mixed),
        published=tuple(PublishedGroup(g, differences(g, shared)) for g in published),
        uncatalogued=tuple(
            ComparedGroup(g, speedup(baseline.epoch2_median_seconds, g.epoch2_median_seconds),
                          False, memory_share(g), differences(g, shared))
            for g in apart),
    )
