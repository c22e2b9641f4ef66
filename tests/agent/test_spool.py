"""The spool: atomic writes, moves between folders, damaged files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpubench import record
from gpubench.agent.spool import Spool, default_spool_dir
from gpubench.errors import InvalidRecord


def test_write_then_read_back(tmp_path: Path, make_run) -> None:
    spool = Spool(tmp_path / "spool")
    run = make_run(gpu_name="NVIDIA H200", model="B3")
    path = spool.write(run)
    assert path == tmp_path / "spool" / "pending" / f"{run.run_id}.json"
    [entry] = spool.pending()
    assert spool.load(entry) == run
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left
    assert spool.counts() == {"pending": 1, "unfinished": 0, "sent": 0, "refused": 0,
                             "damaged": 0}


def test_moves_keep_the_file_and_its_reason(tmp_path: Path, make_run) -> None:
    spool = Spool(tmp_path)
    for _ in range(3):
        spool.write(make_run())
    first, second, third = spool.pending()
    spool.mark_sent(first)
    refused = spool.mark_refused(second, "run.config.model: unknown 'B9'")
    damaged = spool.mark_damaged(third, "not valid JSON")
    assert spool.counts() == {"pending": 0, "unfinished": 0, "sent": 1, "refused": 1,
                             "damaged": 1}
    assert refused.reason == "run.config.model: unknown 'B9'"
    assert spool.entries("damaged")[0].reason == "not valid JSON" == damaged.reason
    assert (tmp_path / "sent" / first.name).exists()


def test_damaged_file_names_the_file(tmp_path: Path, make_run) -> None:
    spool = Spool(tmp_path)
    path = spool.write(make_run())
    path.write_text(path.read_text()[:100])  # cut short
    [entry] = spool.pending()
    with pytest.raises(InvalidRecord, match=str(path)):
        spool.load(entry)
    data = json.loads(record.to_json(make_run()))
    data["config"]["no_such_field"] = 1
    other = tmp_path / "pending" / "other.json"
    other.write_text(json.dumps(data))
    with pytest.raises(InvalidRecord, match="other.json"):
        spool.load(next(e for e in spool.pending() if e.name == "other.json"))


def test_a_write_cut_short_leaves_no_pending_record(tmp_path: Path, make_run) -> None:
    """A process killed in the middle of a write leaves only its temporary file,
    which the spool never takes for a record."""
    run = make_run()
    script = textwrap.dedent(f"""
        import os, sys
        from gpubench.agent import spool as s
        real_replace = os.replace
        def die(*args):
            os._exit(9)  # killed after writing and fsyncing, before the rename
        os.replace = die
        from gpubench import record
        run = record.from_json(sys.stdin.read())
        s.Spool({str(tmp_path)!r}).write(run)
    """)
    done = subprocess.run([sys.executable, "-c", script], input=record.to_json(run),
                          text=True, check=False)
    assert done.returncode == 9
    names = os.listdir(tmp_path / "pending")
    assert names == [f".tmp-{run.run_id}.json"]
    assert Spool(tmp_path).pending() == []
    # The next write of the same run replaces the leftover cleanly.
    Spool(tmp_path).write(run)
    assert [e.name for e in Spool(tmp_path).pending()] == [f"{run.run_id}.json"]


def test_run_id_cannot_escape_the_folder(tmp_path: Path, make_run) -> None:
    run = make_run()
    run.run_id = "../../etc/passwd"
    with pytest.raises(InvalidRecord, match="run_id"):
        Spool(tmp_path).write(run)


def test_default_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GPUBENCH_SPOOL", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_spool_dir() == tmp_path / "data" / "gpubench" / "spool"
    monkeypatch.setenv("GPUBENCH_SPOOL", str(tmp_path / "mine"))
    assert default_spool_dir() == tmp_path / "mine"
