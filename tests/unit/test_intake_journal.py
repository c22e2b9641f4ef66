"""The intake journal's file format and the run_id filter, on real files."""

from __future__ import annotations

import logging
import os
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from factories import make_run

from gpubench.collector import intake
from gpubench.collector.intake import Journal, JournalEntry, KnownRuns


def _make_entry(i: int) -> JournalEntry:
    run = make_run(label=f"run {i}")
    return JournalEntry(
        run_id=run.run_id, submitter=f"lab-{i}", received_at=datetime(2026, 11, 30, 1, 2, 3, i),
        content_sha256=f"{i:064x}", record=run.SerializeToString(deterministic=True),
    )


ENTRIES = [_make_entry(i) for i in range(6)]


def _entry(i: int) -> JournalEntry:
    return ENTRIES[i]


def _reopen(folder: Path) -> tuple[Journal, list[JournalEntry]]:
    journal = Journal(folder)
    return journal, journal.read_leftovers()


def test_entries_come_back_as_written_in_order_after_a_reopen(tmp_path: Path) -> None:
    folder = tmp_path / "c.duckdb.intake"
    journal = Journal(folder)
    written = ENTRIES[:5]
    journal.append(written[:2])
    journal.append(written[2:])
    # No close: a crash leaves the segment as it is.
    again, entries = _reopen(folder)
    assert entries == written
    assert again.current not in again.leftovers  # new entries go to a new segment


def test_seal_starts_a_new_segment_and_drop_deletes_the_sealed_ones(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j")
    journal.append([_entry(1)])
    sealed = journal.seal()
    journal.append([_entry(2)])
    assert len(sealed) == 1 and sealed[0].exists() and journal.current not in sealed
    journal.drop(sealed)
    assert not sealed[0].exists()
    _, entries = _reopen(tmp_path / "j")
    assert entries == [_entry(2)]


def test_sealing_an_empty_segment_starts_no_new_file(tmp_path: Path) -> None:
    """A flush that fails (a full disk) is retried every second: each try seals, and must
    not leave an empty segment behind each time."""
    journal = Journal(tmp_path / "j")
    journal.append([_entry(1)])
    sealed = journal.seal()
    for _ in range(5):
        assert journal.seal() == sealed
    assert sorted(p.name for p in (tmp_path / "j").iterdir()) == sorted(
        [p.name for p in sealed] + [journal.current.name]
    )
    journal.drop(sealed)
    journal.close()
    assert list((tmp_path / "j").iterdir()) == []


def test_a_probe_leaves_nothing_behind(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j")
    before = sorted((tmp_path / "j").iterdir())
    journal.probe()
    assert sorted((tmp_path / "j").iterdir()) == before


@pytest.mark.parametrize("tail", [b"\x10\x00", b"\x00" * 300])
def test_an_unfinished_write_at_the_end_is_skipped_quietly(
    tmp_path: Path, tail: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "j"
    journal = Journal(folder)
    journal.append([_entry(1), _entry(2)])
    with open(journal.current, "ab") as segment:  # a crash in the middle of the next write
        segment.write(tail)
    with caplog.at_level(logging.WARNING):
        _, entries = _reopen(folder)
    assert entries == [_entry(1), _entry(2)]
    assert "unfinished write" in caplog.text
    assert not list(folder.glob("*" + intake.DAMAGED_SUFFIX))


def test_a_cut_entry_is_an_unfinished_write(tmp_path: Path) -> None:
    folder = tmp_path / "j"
    journal = Journal(folder)
    journal.append([_entry(1), _entry(2)])
    size = journal.current.stat().st_size
    os.truncate(journal.current, size - 7)
    _, entries = _reopen(folder)
    assert entries == [_entry(1)]


def test_a_damaged_entry_is_named_and_its_segment_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "j"
    journal = Journal(folder)
    journal.append([_entry(1)])
    offset = journal.current.stat().st_size
    journal.append([_entry(2), _entry(3)])
    data = bytearray(journal.current.read_bytes())
    data[offset + 40] ^= 0xFF  # a flipped byte inside entry 2's payload
    journal.current.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        _, entries = _reopen(folder)
    assert entries == [_entry(1)]
    assert f"checksum mismatch at byte {offset}" in caplog.text
    kept = list(folder.glob("*" + intake.DAMAGED_SUFFIX))
    assert len(kept) == 1 and kept[0].read_bytes() == bytes(data)


def test_a_failed_write_is_cut_back_so_the_next_one_reads_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "j"
    journal = Journal(folder)
    journal.append([_entry(1)])
    size = journal.current.stat().st_size
    real_sync = os.fdatasync
    calls = []

    def failing_once(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        real_sync(fd)

    monkeypatch.setattr(intake.os, "fdatasync", failing_once)
    with pytest.raises(OSError, match="No space"):
        journal.append([_entry(2)])
    assert journal.current.stat().st_size == size
    journal.append([_entry(3)])
    _, entries = _reopen(folder)
    assert entries == [_entry(1), _entry(3)]


def test_known_runs_never_forget_a_run_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(intake, "MERGE_EVERY", 50)  # several merges into the sorted array
    stored = [str(uuid.uuid4()) for _ in range(300)]
    known = KnownRuns(stored[:100])
    for start in range(100, 300, 20):
        known.add(stored[start:start + 20])
    assert all(run_id in known for run_id in stored)
    strangers = [str(uuid.uuid4()) for _ in range(1000)]
    assert sum(run_id in known for run_id in strangers) == 0  # 64-bit hashes: no collisions
