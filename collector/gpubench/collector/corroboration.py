"""Whether a figure is corroborated: one submitter, one voice, and two voices that agree.

A leaderboard entry's figure is the median of its submitters' medians (collector.
aggregates), so a token that submits a thousand runs has one voice among the others.
The figure is corroborated when a reference run agrees with it (the operator's verified
run of the card in the same configuration, from the GPU catalogue, or a published run of
the same configuration), or when the medians of CORROBORATING_SUBMITTERS submitters or
more agree with it. An entry with one submitter and no reference is "one source".
Pure Python, no database.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpubench.collector import ceilings

# Two figures agree when they are this close, as a share of the figure: honest repeats of
# one configuration on one card differ by a few percent (the project's default B0 runs
# on the H200: 2,590-2,760 img/s), other machines of the same card by a little more.
AGREE_SHARE = 0.10
# How many submitters whose medians agree corroborate a figure.
CORROBORATING_SUBMITTERS = 2


@dataclass(frozen=True)
class Corroboration:
    """What stands behind a figure."""

    submitters: int
    corroborated: bool
    by: str  # in words, "" when not corroborated


def agrees(value: float, figure: float) -> bool:
    """Whether `value` is within AGREE_SHARE of `figure`."""
    return figure > 0 and abs(value - figure) <= AGREE_SHARE * figure


def corroborate(figure: float, submitter_medians: Sequence[float],
                references: Sequence[tuple[str, bool]]) -> Corroboration:
    """The corroboration of a figure (a median epoch-2 time) from its submitters' medians
    (in the same unit) and the reference runs of its configuration, each (what it is,
    whether it agrees: `agrees` in its own unit)."""
    submitters = len(submitter_medians)
    for what, agreeing in references:
        if agreeing:
            return Corroboration(submitters, True, what)
    agreeing_submitters = sum(1 for m in submitter_medians if agrees(m, figure))
    if agreeing_submitters >= CORROBORATING_SUBMITTERS:
        return Corroboration(submitters, True, f"{agreeing_submitters} submitters")
    return Corroboration(submitters, False, "")


def verified_reference(specs: ceilings.Specs, gpu_name: str, gpu_count: int, model: str,
                       settings: str, precision: str, batch_rule: str
                       ) -> tuple[str, float] | None:
    """The operator's verified run of one such card in exactly this configuration, as
    (what it is, images/s); None when there is none."""
    spec = specs.spec_of(gpu_name)
    if spec is None or gpu_count != 1:
        return None
    best = specs.fastest(spec, model, settings=settings, precision=precision,
                         batch_rule=batch_rule)
    return None if best is None else (f"verified run {best.record}", best.images_per_second)
