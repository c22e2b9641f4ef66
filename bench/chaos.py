"""The collector's fault campaign: real collector processes on loopback, each part
bounded in count and time, and a table of what was tried, lost and duplicated.

    .venv/bin/python bench/chaos.py            # the full campaign (make chaos)
    .venv/bin/python bench/chaos.py --short    # a couple of minutes
    .venv/bin/python bench/chaos.py --parts auth,poison --short

Parts (--parts, comma-separated; all by default):
  kill-single    kill -9 of a single-process collector at random moments, restarted on
                 the same port, under 8 submitters (3,000 acknowledged; short 600)
  kill-owner     the same against `serve --frontends 2`, killing the owner
  kill-frontend  kill -9 of one front-end at a time (the owner restarts it)
  disk-full      the database on a 16 MiB tmpfs filled to the last byte, then freed
                 (skipped with a message where tmpfs cannot be mounted)
  fuzz-bytes     SubmitRun requests with random bytes changed, cut or inserted (2,000)
  fuzz-fields    valid runs with one field set to an extreme value (2,000)
  auth           every method with no, a wrong, a revoked and a non-admin token, a
                 token revoked while 8 threads submit with it, then a valid call from
                 the address that failed so often
  poison         oversized records, unknown fields, config.train_images 3e9 and other
                 poisoned values, each followed by a valid run that must be stored
  agent-push     `gpubench-agent push` killed -9 mid-way, pushed again to the end
  flood          1,100 idle connections, reopened as they are closed, while a new
                 client of the same address calls every 0.25 s (30 s; short 10 s)
  flood-frontends  the same with 2,100 against `serve --frontends 2`
  lock-out       a wrong token every 2 s (and 4 threads guessing flat out for a third of
                 the time) beside valid callers of the same address (60 s; short 15 s)
  tampered       a live backup tampered with in 11 ways, each restored: each refused
                 with its reason, no database left; the backup as taken restored whole
  storm          a front-end killed -9 every 0.2-1.0 s under 8 submitters (40 kills;
                 short 10): never no front-end for more than 5 s, never a stop
  edge-flood, edge-visitors  HAProxy (docker/edge) in front of a collector and the site:
                 bench/chaos_edge.py says what each does
  fabrication    a stranger's token submits what once led the leaderboard, made from the
                 real H200 default run scaled consistently (1.3x-5.7x, made-up and
                 look-alike names, a blank name, energy of nothing), then ten runs at
                 1.5x: each refused or flagged, none leads the default leaderboard or
                 enters Compare, the honest median moves by at most 2%

The parts live in chaos_crashes.py (kills, the disk, the push), chaos_fuzz.py (fuzzing,
poison), chaos_auth.py, chaos_attacks.py (the flood, the lock-out, tampered backups,
the kill storm) and chaos_fabrication.py; chaos_support.py runs collectors and
submitters and prints the table.

Every acknowledged run must be in the database (or its quarantine) afterwards, once;
"wrong" counts answers a part does not allow (a valid run refused for good, a bad
token let in, INTERNAL, a legitimate client not answered within 2 s beside a flood, no
front-end for more than 5 s, a tampered backup restored). Exit code 1 when any is lost,
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

from chaos_attacks import flood_part, lockout_part, storm_part, tampered_part
from chaos_auth import auth_part
from chaos_crashes import agent_push_part, disk_full_part, kill_part
from chaos_edge import edge_parts
from chaos_fabrication import fabrication_part
from chaos_fuzz import fuzz_part, mutated_bytes, mutated_field, poison_part
from chaos_support import Tally, table

PARTS = ("kill-single", "kill-owner", "kill-frontend", "disk-full", "fuzz-bytes",
         "fuzz-fields", "auth", "poison", "agent-push", "flood", "flood-frontends", "lock-out",
         "tampered", "storm", "fabrication", "edge-flood", "edge-visitors")


# -- the campaign ----------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="The collector's fault campaign against real collector processes on "
                    "loopback; prints a table and exits 1 if any acknowledged run was lost "
                    "or duplicated, or any answer was wrong.")
    parser.add_argument("--short", action="store_true",
                        help="Fewer submissions, kills and cases: a couple of minutes.")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"Comma-separated parts to run (default all: {', '.join(PARTS)}).")
    parser.add_argument("--seed", type=int, default=None,
                        help="Seed of the random moments and cases (default: from the clock; "
                             "printed, so a run can be repeated).")
    parser.add_argument("--json", type=Path, default=None,
                        help="Also write the tallies to this JSON file.")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)} (one of {', '.join(PARTS)})")
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    short = args.short
    target = 600 if short else 3000
    kills = 2 if short else 5
    cases = 200 if short else 2000
    tallies: list[Tally] = []
    started = time.monotonic()
    print(f"collector fault campaign: {'short' if short else 'full'}, seed {seed}, parts "
          f"{', '.join(parts)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="gpubench-chaos-") as tmp:
        folder = Path(tmp)
        plan: dict[str, Callable[[], Tally]] = {
            "kill-single": lambda: kill_part("kill-9 single", folder, frontends=1,
                                             victim="owner", target=target, kills=kills, rng=rng),
            "kill-owner": lambda: kill_part("kill-9 owner", folder, frontends=2,
                                            victim="owner", target=target, kills=kills, rng=rng),
            "kill-frontend": lambda: kill_part("kill-9 front-end", folder, frontends=2,
                                               victim="frontend", target=target, kills=kills,
                                               rng=rng),
            "disk-full": lambda: disk_full_part(folder, target=target // 2),
            "fuzz-bytes": lambda: fuzz_part("fuzz bytes", folder, cases, mutated_bytes, rng),
            "fuzz-fields": lambda: fuzz_part("fuzz fields", folder, cases, mutated_field, rng),
            "auth": lambda: auth_part(folder, rounds=1 if short else 5),
            "poison": lambda: poison_part(folder, rounds=2 if short else 10),
            "agent-push": lambda: agent_push_part(folder, runs=60 if short else 300,
                                                  kills=2 if short else 5, rng=rng),
            "flood": lambda: flood_part("flood", folder, frontends=1, connections=1100,
                                        seconds=10 if short else 30),
            "flood-frontends": lambda: flood_part("flood front-ends", folder, frontends=2,
                                                  connections=2100,
                                                  seconds=10 if short else 30),
            "lock-out": lambda: lockout_part(folder, seconds=15 if short else 60),
            "tampered": lambda: tampered_part(folder, runs=200 if short else 1000),
            "storm": lambda: storm_part(folder, kills=10 if short else 40, rng=rng),
            "fabrication": lambda: fabrication_part(folder),
            **edge_parts(folder, short=short),
        }
        for part in parts:
            began = time.monotonic()
            try:
                tally = plan[part]()
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
