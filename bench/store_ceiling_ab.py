"""The store's ceiling at two versions of the code, alternated: runs/s with 16 threads
submitting through the group commit, until every run is in DuckDB (no gRPC), as
bench/collector_bench.py's "16 threads, group commit" line measures it.

    .venv/bin/python bench/store_ceiling_ab.py OLD_TREE [--rounds 4] [--runs 2000]

OLD_TREE is a tree of the older code with its wire code (`git archive REV | tar -x -C
OLD_TREE`, then its gpubench/v1 from `make proto`); its own bench/collector_bench.py and
tests/factories.py make its runs. This checkout is the newer side. Each measurement is a
fresh process (the older side's with PYTHONPATH at its tree); the rounds alternate which
side goes first. Prints every figure, each side's median and the ratio new/old.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEASURE = """
import sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1] + "/bench")
import collector_bench
from gpubench.collector import store
assert store.__file__.startswith(sys.argv[1]), store.__file__
print(collector_bench.store_group_commit(Path(tempfile.mkdtemp()), 16, int(sys.argv[2])))
"""


def measure(tree: Path, runs: int, old: bool) -> float:
    """One figure (runs/s) of `tree`'s store, in a fresh process outside the repository."""
    env = dict(os.environ)
    if old:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-c", MEASURE, str(tree), str(runs)], env=env,
                          cwd="/", capture_output=True, text=True, timeout=600, check=True)
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("old_tree", type=Path)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--runs", type=int, default=2000, help="runs a measurement")
    args = parser.parse_args()
    found: dict[str, list[float]] = {"old": [], "new": []}
    for round_ in range(args.rounds):
        order = ("old", "new") if round_ % 2 == 0 else ("new", "old")
        for side in order:
            tree = args.old_tree.resolve() if side == "old" else ROOT
            rate = measure(tree, args.runs, side == "old")
            found[side].append(rate)
            print(f"  round {round_ + 1} {side}: {rate:7.0f} runs/s", flush=True)
    old, new = statistics.median(found["old"]), statistics.median(found["new"])
    for side, median in (("old", old), ("new", new)):
        print(f"{side}: median {median:.0f} runs/s "
              f"({', '.join(f'{r:.0f}' for r in found[side])})")
    print(f"new/old: {new / old:.3f}")


if __name__ == "__main__":
    main()
