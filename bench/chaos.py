"""The collector's fault campaign: real collector processes on loopback, each part
bounded in count and time, and a table of what was tried, lost and duplicated.

    .venv/bin/python bench/chaos.py            # the full campaign (make chaos)
    .venv/bin/python bench/chaos.py --short    # a couple of minutes
    .venv/bin/python bench/chaos.py --parts auth,poison --short

Parts (--parts, comma-separated; all by default):
  kill           kill -9 of the collector at random moments, restarted on the same port,
                 under 8 submitters (3,000 acknowledged; short 600)
  disk-full      the database on a 16 MiB tmpfs filled to the last byte, then freed:
                 one log line when it begins, one when it ends (skipped with a message
                 where tmpfs cannot be mounted)
  fuzz-bytes     SubmitRun requests with random bytes changed, cut or inserted (2,000)
  fuzz-fields    valid runs with one field set to an extreme value (2,000)
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
  edge-flood, edge-visitors  HAProxy (docker/edge) in front of a collector and the site:
                 bench/chaos_edge.py says what each does
  fabrication    a stranger's token submits what once led the leaderboard, made from the
                 real H200 default run scaled consistently (1.3x-5.7x, made-up and
                 look-alike names, a blank name, energy of nothing), then ten runs at
                 1.5x: each refused or flagged, none leads the default leaderboard or
                 enters Compare, the honest median moves by at most 2%

The parts live in chaos_crashes.py (kills, the disk, the push), chaos_fuzz.py (fuzzing,
poison), chaos_auth.py, chaos_attacks.py (the flood, the lock-out, tampered backups)
and chaos_fabrication.py; chaos_support.py runs collectors and
submitters and prints the table.

Every acknowledged run must be in the database afterwards, once;
"wrong" counts answers a part does not allow (a valid run refused for good, a bad
token let in, INTERNAL, a legitimate client not answered within 2 s beside a flood, a
tampered backup restored, a full disk logged more than once). Exit code 1 when any is lost,
duplicated or wrong.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from chaos_attacks import HTTP2_GREETING, flood_part, lockout_part, tampered_part
from chaos_auth import auth_part
from chaos_crashes import agent_push_part, disk_full_part, kill_part
from chaos_edge import edge_parts
from chaos_fabrication import fabrication_part
from chaos_fuzz import fuzz_part, mutated_bytes, mutated_field, poison_part
from chaos_support import Tally, table

# Each part: its name and what runs it (given the campaign's settings). Other modules
# add theirs to the list (bench/chaos_edge.py: the parts through the compose proxy).
Part = tuple[str, Callable[["Settings"], Tally]]


class Settings:
    """What every part is given: a folder of its own, the random source, --short."""

    def __init__(self, folder: Path, rng: random.Random, short: bool) -> None:
        self.folder, self.rng, self.short = folder, rng, short
        self.target = 600 if short else 3000  # acknowledgements under kills
        self.kills = 2 if short else 5
        self.cases = 200 if short else 2000  # fuzz cases
        self.flood_s = 10 if short else 30


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
    # HAProxy (docker/edge) in front of a collector and the site: bench/chaos_edge.py.
    *((name, lambda s, name=name: edge_parts(s.folder, short=s.short)[name]())
      for name in ("edge-flood", "edge-visitors")),
]


# -- the campaign ----------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="The collector's fault campaign against real collector processes on "
                    "loopback; prints a table and exits 1 if any acknowledged run was lost "
                    "or duplicated, or any answer was wrong.")
    parser.add_argument("--short", action="store_true",
                        help="Fewer submissions, kills and cases: a couple of minutes.")
    names = [name for name, _ in PARTS]
    parser.add_argument("--parts", default=",".join(names),
                        help=f"Comma-separated parts to run (default all: {', '.join(names)}).")
    parser.add_argument("--seed", type=int, default=None,
                        help="Seed of the random moments and cases (default: from the clock; "
                             "printed, so a run can be repeated).")
    parser.add_argument("--json", type=Path, default=None,
                        help="Also write the tallies to this JSON file.")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in names]
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)} (one of {', '.join(names)})")
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    short = args.short
    tallies: list[Tally] = []
    started = time.monotonic()
    print(f"collector fault campaign: {'short' if short else 'full'}, seed {seed}, parts "
          f"{', '.join(parts)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="gpubench-chaos-") as tmp:
        settings = Settings(Path(tmp), rng, short)
        plan = dict(PARTS)
        for part in parts:
            began = time.monotonic()
            try:
                tally = plan[part](settings)
            except Exception as exc:  # the campaign's own failure: the part counts as failed
                tally = Tally(part, wrong=1, note=f"the part failed: {exc!r}"[:300])
            print(f"  {part}: {time.monotonic() - began:.0f} s", flush=True)
            tallies.append(tally)
    print()
    print(table(tallies))
    failed = [t.part for t in tallies if t.failed]
    print(f"\n{len(tallies)} part(s) in {time.monotonic() - started:.0f} s; "
          + (f"FAILED: {', '.join(failed)}" if failed else "nothing lost, duplicated or wrong"))
    if args.json:
        args.json.write_text(json.dumps({
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "seed": seed, "short": short, "machine": platform.platform(),
            "tallies": [{"part": t.part, "tried": t.tried, "lost": t.lost,
                         "duplicated": t.duplicated, "wrong": t.wrong, "codes": dict(t.codes),
                         "recover_s": t.recover_s, "note": t.note} for t in tallies],
        }, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
