"""`gpubench-collector --version` and `--log-level`, as the console script runs them."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from factories import make_run

from gpubench import record
from gpubench.collector.intake import Journal, JournalEntry, journal_folder
from gpubench.versions import VERSION

COLLECTOR = str(Path(sys.executable).with_name("gpubench-collector"))


def collector(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COLLECTOR, *args], capture_output=True, text=True, timeout=60)


def test_version() -> None:
    done = collector("--version")
    assert done.returncode == 0 and done.stdout == f"gpubench-collector, version {VERSION}\n"


def leftover_run(db: Path) -> None:
    """A run acknowledged but not yet in the database, as a collector killed at once
    leaves it in the intake journal."""
    run = make_run()
    journal = Journal(journal_folder(db))
    journal.append([JournalEntry(run.run_id, "lab", datetime.now(timezone.utc).replace(
        tzinfo=None), record.content_sha256(run), run.SerializeToString(deterministic=True))])
    journal.close()


def test_log_level_info_shows_what_the_collector_does(tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    leftover_run(db)
    # Opening the database stores the journal's runs and says so at INFO, the default.
    done = collector("token", "list", "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert " INFO gpubench.collector.flusher: " in done.stderr
    assert "stored 1 acknowledged run(s) from" in done.stderr

    quiet_db = tmp_path / "quiet.duckdb"
    leftover_run(quiet_db)
    quiet = collector("--log-level", "warning", "token", "list", "--db", str(quiet_db))
    assert quiet.returncode == 0 and "INFO" not in quiet.stderr

    bad = collector("--log-level", "chatty", "token", "list", "--db", str(db))
    assert bad.returncode == 2 and "'chatty' is not one of" in bad.stderr
    assert "--log-level" in collector("--help").stdout
