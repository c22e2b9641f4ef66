"""Reading stored runs: one by run_id, pages of them (ListRuns) with their page tokens,
counts. Every read sees every run acknowledged before it began (a run is acknowledged
once its commit has returned) and never waits for a write (DuckDB's MVCC). A run's
outlier flag and score are computed as it is read, from its group's runs
(collector.outliers).
"""

from __future__ import annotations

import base64
import builtins  # RunReads has a method named list
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from os.path import commonprefix
from typing import TYPE_CHECKING, Any

from gpubench.collector import ceilings, outliers
from gpubench.collector.database import UntilChanged, transaction
from gpubench.collector.rows import REASON_SEPARATOR
from gpubench.errors import InvalidRecord, NotFound
from gpubench.v1 import collector_pb2, run_pb2

if TYPE_CHECKING:  # given by the store
    from gpubench.collector.database import Database

STORED_COLUMNS = ("run_id, record, submitter, received_at, outlier, outlier_score, "
                  "content_sha256, flagged, flag_reasons")
# A stored run's bytes in a ListRuns page, from above: its record, submitter and flag
# reasons, and 256 for the rest (run_id and hash, times, flags, each field's tag and
# length, the entry's own).
_STORED_BYTES = ("octet_length(record) + strlen(submitter) + strlen(flag_reasons) "
                 "+ 256")
# A run id in full (a canonical UUID), the fewest characters a listing shows of one
# (StoredRun.short_id) and the fewest GetRun takes in place of it.
FULL_RUN_ID = 36
SHORT_ID = 8
LEAST_PREFIX = 4


@dataclass(frozen=True)
class RunFilter:
    """Which runs to list; empty/zero fields match everything."""

    gpu_name: str = ""  # case-insensitive substring
    model: str = ""
    backend: str = ""
    precision: str = ""
    gpu_count: int = 0
    submitter: str = ""
    since: datetime | None = None  # created_at, UTC
    until: datetime | None = None


class RunReads:
    """The reads of single runs and pages of runs."""

    def __init__(self, database: Database, scores: outliers.GroupScores) -> None:
        self._db = database
        self._scores = scores
        self._answers = UntilChanged(database, size=1)  # the counts, until the runs change

    def get(self, run_id: str) -> collector_pb2.StoredRun:
        """The stored run whose id is `run_id`, or starts with it (LEAST_PREFIX
        characters at least); NotFound, or InvalidRecord when several run ids start
        with it."""
        prefix = run_id.strip().lower()
        whole = len(prefix) >= FULL_RUN_ID
        if not whole and len(prefix) < LEAST_PREFIX:
            raise InvalidRecord("run_id", f"{run_id[:64]!r}: give the whole run id, or "
                                          f"{LEAST_PREFIX} of its first characters at least")
        with self._db.read() as con:
            where = "run_id = ?" if whole else "starts_with(run_id, ?)"
            rows = con.execute(
                f"SELECT run_id FROM runs WHERE {where} ORDER BY run_id LIMIT 4", [prefix]
            ).fetchall()
            if len(rows) == 1:
                rows = self._stored_rows(con, [rows[0][0]])
            short = _short_ids(con, [rows[0][0]]) if len(rows) == 1 else {}
        if not rows:
            raise NotFound(f"run_id {run_id}: " + ("no such run" if whole else
                                                       "no stored run id starts with it"))
        if len(rows) > 1:
            many = "more than 3" if len(rows) > 3 else str(len(rows))
            shown = ", ".join(r[0] for r in rows[:3])
            raise InvalidRecord("run_id", f"{run_id}: {many} stored run ids start with it "
                                          f"({shown}); give more of it")
        return _stored_run(rows[0], short)

    def count(self) -> int:
        """How many runs are stored."""
        with self._db.read() as con:
            return con.execute("SELECT count(*) FROM runs").fetchall()[0][0]

    def submitter_of(self, run_id: str) -> str:
        """Who submitted a run; NotFound if absent."""
        with self._db.read() as con:
            rows = con.execute(
                "SELECT submitter FROM runs WHERE run_id = ?", [run_id]
            ).fetchall()
        if not rows:
            raise NotFound(f"run_id {run_id}: no such run")
        return rows[0][0]

    def list(
        self, where: RunFilter, *, page_size: int, page_token: str = "",
        page_bytes: int | None = None,
    ) -> tuple[list[collector_pb2.StoredRun], str]:
        """Runs matching `where`, newest first; returns a page and the next page's token.

        A page holds at most `page_size` runs and, given `page_bytes`, ends before the
        run that would take it past that many bytes (it holds one run at least), so its
        size is bounded whatever the runs weigh. The runs' sizes are read first and
        only the page's records after, so a page of large runs is not loaded whole.
        """
        clauses, params = _filter_sql(where)
        if page_token:
            created_at, run_id = _decode_page_token(page_token)
            clauses.append("(created_at, run_id) < (?, ?)")
            params += [created_at, run_id]
        order = " ORDER BY created_at DESC, run_id DESC"
        with self._db.read() as con:
            sql = f"SELECT run_id, created_at, {_STORED_BYTES} FROM runs"
            if clauses:
                sql += " WHERE " + " AND ".join(clauses)
            heads = con.execute(sql + order + " LIMIT ?", [*params, page_size + 1]).fetchall()
            taken, total = 0, 0
            for _, _, size in heads[:page_size]:
                if page_bytes is not None and taken and total + size > page_bytes:
                    break
                taken, total = taken + 1, total + size
            if not taken:
                return [], ""
            ids = [head[0] for head in heads[:taken]]
            rows = self._stored_rows(con, ids, order)
            short = _short_ids(con, ids)
        last = heads[taken - 1]
        token = _encode_page_token(last[1], last[0]) if len(heads) > taken else ""
        return [_stored_run(r, short) for r in rows], token

    def _stored_rows(self, con: Any, run_ids: Sequence[str], order: str = ""
                     ) -> builtins.list[tuple]:
        """The STORED_COLUMNS of the runs `run_ids`, their outlier flags and scores
        from their groups' scores (one transaction: the scores of what it reads)."""
        ids = list(run_ids)
        with transaction(con):
            scores = self._scores.of(con, outliers.groups_of_runs(), [ids])
            return con.execute(
                f"SELECT {STORED_COLUMNS} FROM {outliers.scored('list_contains(?, run_id)')}"
                f"{order}", [ids, *scores],
            ).fetchall()

    def counts(self) -> dict[str, int]:
        """The runs stored, and how many of them are flagged, outliers and published."""
        return dict(self._answers.get("counts", self._counts))

    def _counts(self) -> dict[str, int]:
        with self._db.read() as con, transaction(con):
            stored, flagged, outlier, published = con.execute(
                "SELECT count(*), count(*) FILTER (WHERE flagged), count(*) FILTER (WHERE "
                f"outlier), count(*) FILTER (WHERE published) FROM {outliers.scored('true')}",
                self._scores.of(con, "true", [])).fetchall()[0]
        return {"runs_stored": stored, "runs_flagged": flagged, "runs_outlier": outlier,
                "runs_published": published}


def equal_where_set(source: object, columns: tuple[str, ...]) -> tuple[list[str], list[Any]]:
    """`column = ?` for each of `columns` that `source` sets (non-empty, non-zero)."""
    clauses: list[str] = []
    params: list[Any] = []
    for column in columns:
        value = getattr(source, column)
        if value:
            clauses.append(f"{column} = ?")
            params.append(value)
    return clauses, params


def _filter_sql(where: RunFilter) -> tuple[list[str], list[Any]]:
    clauses, params = equal_where_set(
        where, ("model", "backend", "precision", "submitter", "gpu_count")
    )
    if where.gpu_name:
        clauses.append("contains(lower(gpu_name), ?)")
        params.append(where.gpu_name.lower())
    if where.since is not None:
        clauses.append("created_at >= ?")
        params.append(where.since)
    if where.until is not None:
        clauses.append("created_at < ?")
        params.append(where.until)
    return clauses, params




def _short_ids(con: Any, run_ids: Sequence[str]) -> dict[str, str]:
    """Each run id's shortest prefix (SHORT_ID characters at least) that no other stored
    run id starts with. Most ids share their first SHORT_ID characters with no other
    (one scan finds which); for the others, one past the longest common prefix with
    their neighbours in order, the only ids that can share more of it."""
    shared = {prefix for (prefix,) in con.execute(
        f"SELECT left(run_id, {SHORT_ID}) AS prefix FROM runs "
        "WHERE prefix IN (SELECT unnest(?)) GROUP BY prefix HAVING count(*) > 1",
        [[run_id[:SHORT_ID] for run_id in run_ids]]).fetchall()}
    found = {run_id: run_id[:SHORT_ID] for run_id in run_ids if run_id[:SHORT_ID] not in shared}
    crowded = [run_id for run_id in run_ids if run_id not in found]
    if not crowded:
        return found
    rows = con.execute(
        """
        SELECT p.id, (SELECT max(r.run_id) FROM runs AS r WHERE r.run_id < p.id),
            (SELECT min(r.run_id) FROM runs AS r WHERE r.run_id > p.id)
        FROM (SELECT unnest(?) AS id) AS p
        """, [crowded]).fetchall()
    return found | {
        run_id: run_id[:max(SHORT_ID, 1 + max(len(commonprefix([run_id, before or ""])),
                                              len(commonprefix([run_id, after or ""]))))]
        for run_id, before, after in rows}


def _stored_run(row: Sequence[Any], short_ids: dict[str, str] | None = None
                ) -> collector_pb2.StoredRun:
    stored = collector_pb2.StoredRun(
        run=run_pb2.Run.FromString(row[1]),
        submitter=row[2],
        outlier=row[4],
        outlier_score=row[5],
        content_sha256=row[6],
        flagged=row[7],
        flag_reasons=row[8].split(REASON_SEPARATOR) if row[8] else [],
        short_id=(short_ids or {}).get(row[0], ""),
    )
    stored.gpu_unrecognised = any(reason.startswith(ceilings.UNRECOGNISED)
                                  for reason in stored.flag_reasons)
    stored.received_at.FromDatetime(row[3])
    return stored


def _encode_page_token(created_at: datetime, run_id: str) -> str:
    raw = f"{created_at.isoformat()}|{run_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_page_token(token: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        when, run_id = raw.split("|", 1)
        return datetime.fromisoformat(when), run_id
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRecord("page_token", "not a token this collector handed out") from exc
