"""Whether a run's energy is what its cards could have drawn in the epoch's time.

The leaderboard's images per joule is the measured epoch's training images over its
energy; a record may claim any energy, so the energy is held to the catalogue's cards
(collector.ceilings): over the measured epoch's wall time it makes a mean power that
lies between a share of the cards' power limit (a GPU that trains draws far more than
nothing: 1e-300 J is no measurement) and the limit itself with the same slack the
record's own power is allowed (collector.plausibility). Images per joule is then bounded
by the card: at most the run's images over the least energy its cards can draw.
Pure Python, no database.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpubench import record
from gpubench.v1 import run_pb2

if TYPE_CHECKING:  # the catalogue's cards are given: no import of it at run time
    from gpubench.collector import ceilings

# The least mean power over a training epoch, as a share of the cards' power limit in the
# catalogue. The project's real runs draw 0.19-0.94x of it (docs/results:
# bench/plausibility_margins.py); an idle H200 draws 80 W of 700 (0.11x), so a twentieth
# is far under any card that trains, and still 35 W on an H200.
LEAST_POWER_SHARE = 0.05
# A mean power over an epoch stays under the cards' power limit; half again for the energy
# counter's interpolation over a short epoch (real runs reach 0.94x of it). The record's
# own power limit (collector.plausibility) and the catalogue's (here) alike.
POWER_LIMIT_FACTOR = 1.5
# The most: the catalogue's limit with that slack.
MOST_POWER_SHARE = POWER_LIMIT_FACTOR


def implausibilities(run: run_pb2.Run, cards: list[ceilings.GpuSpec]) -> list[str]:
    """Why the run's energy is not believable on these cards (empty: it is, or the run
    measured none), one reason each."""
    res = run.result
    epoch = record.measured_epoch(run)
    joules = res.energy_per_epoch_joules or (epoch.energy_joules if epoch else 0.0)
    seconds = (epoch.wall_seconds if epoch else 0.0) or res.epoch2_seconds
    if not (joules > 0 and seconds > 0 and cards):
        return []
    limit = sum(card.power_watts for card in cards)
    watts = joules / seconds
    names = " + ".join(dict.fromkeys(card.name for card in cards))
    if watts < limit * LEAST_POWER_SHARE:
        least = limit * LEAST_POWER_SHARE * seconds
        found = (f"{joules:g} J in the measured epoch's {seconds:g} s is a mean "
                 f"{watts:.3g} W, less than {LEAST_POWER_SHARE:g}x the power limit of "
                 f"{len(cards)}x {names} ({limit:g} W)")
        if run.config.train_images:
            found += (f": {run.config.train_images / joules:.3g} images per joule, at most "
                      f"{run.config.train_images / least:.3g} on these cards")
        return [found]
    if watts > limit * MOST_POWER_SHARE:
        return [f"{joules:g} J in the measured epoch's {seconds:g} s is a mean {watts:,.0f} W, "
                f"more than {MOST_POWER_SHARE:g}x the power limit of {len(cards)}x {names} "
                f"({limit:g} W)"]
    return []
