"""GPU names the catalogue does not know, and the known card such a name imitates.

A run's GPU name is either a catalogued card's (collector.ceilings: the names NVML
gives it, matched exactly) or unrecognised. An unrecognised name is flagged; where it
looks like a catalogued card's ("NVIDIA-H200", "NVIDIA H2OO", "NVIDlA H200",
"nvidia h200", "NVIDIA H200 Ultra") the reason names the card it imitates, so that a
reader sees the imitation at once.

An unrecognised name that is not a catalogued name written differently (its skeleton,
below, is no catalogued name's) may be a card the catalogue does not list yet: its runs,
flagged for nothing else, are shown apart as "not yet in the catalogue"
(collector.aggregates), never ranked with the catalogued cards'.

Names are compared by their skeleton: case folded, the characters people and fonts
confuse mapped to one (O and 0; l, I, i, | and 1), everything but letters and digits
left out. Pure Python, no database.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the catalogue is given: no import of it at run time
    from gpubench.collector import ceilings

# What a flag reason for a name the catalogue does not know begins with (the site and the
# CLI tell such runs apart by it).
UNRECOGNISED = "unrecognised GPU"
# Characters that look alike in the fonts GPU names are read in, each to one stand-in.
_CONFUSABLE = str.maketrans({"o": "0", "l": "1", "i": "1", "|": "1", "!": "1"})


def skeleton(name: str) -> str:
    """The name as it looks: case folded, confusable characters as one, letters and
    digits only ("NVIDlA H2OO" and "nvidia-h200" are both "nv1d1ah200")."""
    folded = name.casefold().translate(_CONFUSABLE)
    return "".join(ch for ch in folded if ch.isalnum())


def imitated(specs: ceilings.Specs, name: str) -> ceilings.GpuSpec | None:
    """The catalogued card an unrecognised name looks like: the one whose catalogue name
    or NVML name has the longest skeleton found in the name's skeleton; None if none is."""
    shape = skeleton(name)
    found = [(len(skeleton(known)), spec) for spec in specs.gpus
             for known in (spec.name, *spec.names) if skeleton(known) in shape]
    return max(found, key=lambda pair: pair[0])[1] if found else None


def not_yet_catalogued(specs: ceilings.Specs, name: str) -> bool:
    """Whether a run's GPU name (several cards' joined with " + ") holds a card the
    catalogue does not list yet: a name no row gives, and none of its unknown names a
    catalogued NVML name written differently (same skeleton: "nvidia h200", "NVIDIA
    H2OO"). A CPU run's (empty) name holds no card."""
    unknown = [part for part in name.split(" + ") if part and specs.spec_of(part) is None]
    return bool(unknown) and all(skeleton(part) not in _catalogued_skeletons(specs)
                                 for part in unknown)


@functools.lru_cache(maxsize=4)
def _catalogued_skeletons(specs: ceilings.Specs) -> frozenset[str]:
    return frozenset(skeleton(known) for spec in specs.gpus for known in (spec.name, *spec.names))


def unrecognised_reason(specs: ceilings.Specs, name: str) -> str:
    """Why a run on a GPU of this (unrecognised) name is flagged, naming the card it
    imitates where it looks like one."""
    card = imitated(specs, name)
    if card is None:
        return (f"{UNRECOGNISED} {name!r}: no card in the collector's catalogue has this "
                "name (gpu_specs.json); its figures are held to the best of every card")
    return (f"{UNRECOGNISED} {name!r}: looks like the catalogued {card.name} but is not a "
            f"name NVML gives it (pattern {card.pattern!r})")
