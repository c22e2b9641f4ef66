"""`gpubench-collector --version` and `--log-level`, as the console script runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from factories import make_run
from old_journal import write_journal

from gpubench.versions import VERSION

COLLECTOR = str(Path(sys.executable).with_name("gpubench-collector"))


def collector(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COLLECTOR, *args], capture_output=True, text=True, timeout=60)


def test_version() -> None:
    done = collector("--version")
    assert done.returncode == 0 and done.stdout == f"gpubench-collector, version {VERSION}\n"


def leftover_run(db: Path) -> None:
    """A run acknowledged but not yet in the database, as an earlier collector killed
    at once leaves it in its intake journal."""
    write_journal(db, [make_run()], submitter="lab")


def test_log_level_info_shows_what_the_collector_does(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    leftover_run(db)
    # Opening the database stores the journal's runs and says so.
    done = collector("token", "list", "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert " WARNING gpubench.collector.leftovers: " in done.stderr
    assert "stored 1 run(s) a previous version acknowledged" in done.stderr

    quiet_db = tmp_path / "quiet.duckdb"
    leftover_run(quiet_db)
    quiet = collector("--log-level", "error", "token", "list", "--db", str(quiet_db))
    assert quiet.returncode == 0 and "WARNING" not in quiet.stderr

    bad = collector("--log-level", "chatty", "token", "list", "--db", str(db))
    assert bad.returncode == 2 and "'chatty' is not one of" in bad.stderr
    assert "--log-level" in collector("--help").stdout
