"""The collector's fault campaign: real collector processes on loopback, each part
bounded in count and time, and a table of what was tried, lost and duplicated at the
end of the report (tests/chaos/conftest.py).

    make chaos                                           # every part at full size
    make chaos CHAOS_ARGS="--chaos-size short"           # every part, short: a minute or two
    make chaos CHAOS_ARGS="-k fabrication --chaos-seed 20261202"
    .venv/bin/python -m pytest tests/chaos               # short, as make test-e2e runs it

Parts (one test each; `-k NAME` picks them):
  kill           kill -9 of the collector at random moments, restarted on the same port,
                 under 8 submitters (3,000 acknowledged; short 600)
  disk-full      the database on a 16 MiB tmpfs filled to the last byte, then freed:
                 one log line when it begins, one when it ends (skipped, saying why,
                 where tmpfs cannot be mounted)
  fuzz-bytes     SubmitRun requests with random bytes changed, cut or inserted (2,000;
                 short 200)
  fuzz-fields    valid runs with one field set to an extreme value (2,000; short 200)
  auth           every method with no, a wrong, a revoked and a non-admin token, a
                 token revoked while 8 threads submit with it, then a valid call from
                 the address that failed so often
  poison         oversized records, unknown fields, config.train_images 3e9 and other
                 poisoned values, each followed by a valid run that must be stored
  agent-push     `gpubench-agent push` killed -9 mid-way, pushed again to the end
  flood          1,100 silent TCP connections, reopened as they are closed, while a new
                 client of the same address calls every 0.25 s (30 s; short 10 s)
  flood-http2    1,100 connections from 11 loopback addresses (127.0.0.2 ... .12) that
                 send the HTTP/2 preface and an empty SETTINGS frame, then nothing
  lock-out       a wrong token every 2 s (and 4 threads guessing flat out for a third of
                 the time) beside valid callers of the same address (60 s; short 15 s)
  tampered       a live backup tampered with in 11 ways, each restored: each refused
                 with its reason, no database left; the backup as taken restored whole
  fabrication    a stranger's token submits what once led the leaderboard, made from the
                 real H200 default run scaled consistently (1.3x-5.7x, made-up and
                 look-alike names, a blank name, energy of nothing), then ten runs at
                 1.5x: each refused or flagged, none leads the default leaderboard or
                 enters Compare, the honest median moves by at most 2%
  edge-flood, edge-visitors  HAProxy (docker/edge) in front of a collector and the site:
                 chaos_edge.py says what each does (skipped, saying why, without HAProxy)

The parts live in chaos_crashes.py (kills, the disk, the push), chaos_fuzz.py (fuzzing,
poison), chaos_auth.py, chaos_attacks.py (the floods, the lock-out, tampered backups),
chaos_fabrication.py and chaos_edge.py; chaos_support.py runs collectors and submitters
and makes the table.

Every acknowledged run must be in the database (or its quarantine) afterwards, once;
"wrong" counts answers a part does not allow (a valid run refused for good, a bad
token let in, INTERNAL, a legitimate client not answered within 2 s beside a flood, a
tampered backup restored, a full disk logged more than once). A part fails when any is
lost, duplicated or wrong.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from chaos_attacks import HTTP2_GREETING, flood_part, lockout_part, tampered_part
from chaos_auth import auth_part
from chaos_crashes import agent_push_part, disk_full_part, kill_part
from chaos_edge import edge_parts
from chaos_fabrication import fabrication_part
from chaos_fuzz import fuzz_part, mutated_bytes, mutated_field, poison_part
from chaos_support import Campaign, Tally, table

pytestmark = [pytest.mark.chaos, pytest.mark.e2e]


class Settings:
    """What every part is given: a folder of its own, the random source, the size."""

    def __init__(self, folder: Path, rng: random.Random, short: bool) -> None:
        self.folder, self.rng, self.short = folder, rng, short
        self.target = 600 if short else 3000  # acknowledgements under kills
        self.kills = 2 if short else 5
        self.cases = 200 if short else 2000  # fuzz cases
        self.flood_s = 10 if short else 30


# Each part: its name and what runs it (given the campaign's settings).
Part = tuple[str, Callable[[Settings], Tally]]
LOOPBACK_SOURCES = tuple(f"127.0.0.{i}" for i in range(2, 13))
PARTS: list[Part] = [
    ("kill", lambda s: kill_part("kill-9", s.folder, target=s.target, kills=s.kills,
                                 rng=s.rng)),
    ("disk-full", lambda s: disk_full_part(s.folder, target=s.target // 2)),
    ("fuzz-bytes", lambda s: fuzz_part("fuzz bytes", s.folder, s.cases, mutated_bytes, s.rng)),
    ("fuzz-fields", lambda s: fuzz_part("fuzz fields", s.folder, s.cases, mutated_field,
                                        s.rng)),
    ("auth", lambda s: auth_part(s.folder, rounds=1 if s.short else 5)),
    ("poison", lambda s: poison_part(s.folder, rounds=2 if s.short else 10)),
    ("agent-push", lambda s: agent_push_part(s.folder, runs=60 if s.short else 300,
                                             kills=2 if s.short else 5, rng=s.rng)),
    ("flood", lambda s: flood_part("flood", s.folder, connections=1100, seconds=s.flood_s)),
    ("flood-http2", lambda s: flood_part("flood http2", s.folder, connections=1100,
                                         seconds=s.flood_s, sources=LOOPBACK_SOURCES,
                                         greeting=HTTP2_GREETING)),
    ("lock-out", lambda s: lockout_part(s.folder, seconds=15 if s.short else 60)),
    ("tampered", lambda s: tampered_part(s.folder, runs=200 if s.short else 1000)),
    ("fabrication", lambda s: fabrication_part(s.folder)),
    # HAProxy (docker/edge) in front of a collector and the site: chaos_edge.py.
    *((name, lambda s, name=name: edge_parts(s.folder, short=s.short)[name]())
      for name in ("edge-flood", "edge-visitors")),
]


@pytest.mark.parametrize("part", [name for name, _ in PARTS])
def test_nothing_is_lost_duplicated_or_answered_wrong(part: str, campaign: Campaign,
                                                      tmp_path: Path) -> None:
    folder = tmp_path / part
    folder.mkdir()
    # A random source of each part's own: a part repeats with its seed, whichever run.
    settings = Settings(folder, random.Random(f"{campaign.seed}-{part}"), campaign.short)
    began = time.monotonic()
    try:
        tally = dict(PARTS)[part](settings)
    except Exception as exc:  # the part's own failure: in the table, then the traceback
        campaign.add(Tally(part, wrong=1, note=f"the part failed: {exc!r}"[:300]),
                     time.monotonic() - began)
        raise
    campaign.add(tally, time.monotonic() - began)
    if tally.note.startswith("skipped: "):
        pytest.skip(tally.note.removeprefix("skipped: "))
    assert not tally.failed, "\n" + table([tally])
