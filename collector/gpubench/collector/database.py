"""The collector's DuckDB file: the one connection, a cursor per thread, the write lock,
the schema's migrations, opening again after a fatal error, and whole-file copies.

DuckDB cursors are connections of their own to the same database and safe to use side
by side, one per thread. Reads need no lock: each statement reads a snapshot of what
was committed when it began (DuckDB's MVCC; docs: "Concurrency", "Transaction
Management"). Writes take `write_lock`, so that concurrent RPCs never produce
transaction conflicts (DuckDB's optimistic concurrency refuses the second of two
transactions that change one row).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa

from gpubench.collector import migrations, outliers
from gpubench.collector.durability import storage_error
from gpubench.collector.errors import (
    DatabaseLocked,
    SchemaTooNew,
    ShuttingDown,
    StorageUnavailable,
)
from gpubench.collector.rows import utc_now

log = logging.getLogger(__name__)


def _usable_cores() -> int:
    # DuckDB sizes its thread pool by the machine's cores; a container's CPU set or
    # `taskset` may allow fewer, and more threads than cores only contend.
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


class Database:
    """The DuckDB file at `path`, opened and migrated; safe to share between threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._conn: duckdb.DuckDBPyConnection | None = self._connect()
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise DatabaseLocked(
                    f"{self.path}: the database is in use by another process (a running collector?)"
                ) from exc
            raise
        self._cursor_lock = threading.Lock()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._local = threading.local()
        # A fatal error (a checkpoint on a full disk) leaves DuckDB refusing every
        # statement until the database is opened again: the store does so (`reopen`),
        # and each opening gets a new epoch, so that threads take new cursors.
        self.broken = False
        self._epoch = 0
        self.write_lock = threading.Lock()
        self.closed = False
        try:
            self._migrate()
        except BaseException:
            self._conn.close()  # release the file: nothing else may use it now
            raise

    def _connect(self) -> duckdb.DuckDBPyConnection:
        return duckdb.connect(str(self.path), config={"threads": _usable_cores()})

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """This thread's cursor (a new one after the database was opened again)."""
        if self.closed:  # a thread's cursor is closed with the store: say why
            raise ShuttingDown("collector shutting down (its database is closed)")
        cursor = getattr(self._local, "cursor", None)
        if cursor is None or getattr(self._local, "epoch", None) != self._epoch:
            cursor = self._new_cursor()
            self._local.cursor, self._local.epoch = cursor, self._epoch
        return cursor

    def _new_cursor(self) -> duckdb.DuckDBPyConnection:
        with self._cursor_lock:
            if self.closed:
                raise ShuttingDown("collector shutting down (its database is closed)")
            if self._conn is None:
                raise StorageUnavailable(f"cannot store runs now: {self.path} is being "
                                         "opened again after a fatal error; retry later")
            cursor = self._conn.cursor()
            self._cursors.append(cursor)
        return cursor

    @contextlib.contextmanager
    def own_cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor for one long transaction (a backup's), closed after the block, or
        with the database if that closes first."""
        con = self._new_cursor()
        try:
            yield con
        finally:
            with self._cursor_lock:
                with contextlib.suppress(duckdb.Error):
                    con.close()
                with contextlib.suppress(ValueError):
                    self._cursors.remove(con)

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """A read's failure of the storage raised as StorageFull or StorageUnavailable
        (retryable); a broken database is reported for opening again."""
        try:
            yield
        except Exception as exc:
            if isinstance(exc, duckdb.FatalException):
                self.broken = True  # the next write, or the store's retry, opens it again
            error = storage_error(exc, f"reading {self.path}")
            if error is None:
                raise
            raise error from exc

    @contextlib.contextmanager
    def read(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """This thread's cursor for a read, its storage failures raised as retryable
        (`reading`)."""
        with self.reading():
            yield self.cursor()

    def reopen(self) -> None:
        """Open the database again after a fatal error (called by the store with the
        write lock held; raises when it cannot yet: retried). DuckDB replays its log."""
        with self._cursor_lock:
            if self.closed:
                return
            for cursor in self._cursors:  # every cursor, or the broken database stays open
                with contextlib.suppress(duckdb.Error):
                    cursor.close()
            self._cursors = []
            if self._conn is not None:
                with contextlib.suppress(duckdb.Error):
                    self._conn.close()
                self._conn = None
            self._epoch += 1
            self._conn = self._connect()
        self.broken = False
        log.warning("%s: opened again after a fatal error of the database", self.path)

    def close(self) -> None:
        """Close every cursor (after the write in flight), checkpoint and close the file."""
        with self._cursor_lock:
            if self.closed:
                return
            self.closed = True
            with self.write_lock:
                # Cursors first: one holding an unread result keeps its transaction open,
                # and an open transaction prevents the checkpoint.
                for cursor in self._cursors:
                    cursor.close()
                if self._conn is None:  # not opened again after a fatal error
                    return
                try:
                    self._conn.execute("CHECKPOINT")
                except duckdb.Error as exc:  # an open transaction, a full disk
                    # Nothing is lost: opening the file replays the write-ahead log.
                    log.warning("could not checkpoint on close (%s); the log is replayed on "
                                "open", str(exc).splitlines()[0])
            self._conn.close()

    def _migrate(self) -> None:
        con = self._conn
        assert con is not None  # called by __init__ only, just after _connect
        con.execute(migrations.CREATE_LEDGER)
        applied = {name for (name,) in con.execute("SELECT name FROM schema_migrations").fetchall()}
        newer = migrations.unknown(applied)
        if newer:
            raise SchemaTooNew(
                f"{self.path}: written by a newer collector (migrations {', '.join(newer)}); "
                "upgrade gpubench"
            )
        pending = migrations.pending(applied)
        # The figures are computed in this code's shape of group_figures, which exists
        # only once every pending migration has run: only the last one that asks refills.
        refills = [m for m in pending if m.refill_group_figures]
        for migration in pending:
            with transaction(con):
                for statement in migration.statements:
                    con.execute(statement)
                if migration.backfill is not None:
                    migration.backfill(con)
                if refills and migration is refills[-1]:
                    outliers.rescore(con, None)
                con.execute(
                    "INSERT INTO schema_migrations VALUES (?, ?)", [migration.name, utc_now()]
                )

    def applied_migrations(self) -> list[str]:
        """The names of the migrations this database has had, in order applied."""
        rows = self.cursor().execute(
            "SELECT name FROM schema_migrations ORDER BY applied_at, name"
        ).fetchall()
        return [name for (name,) in rows]


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """One transaction: committed when the block ends, rolled back if it raises."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


@contextlib.contextmanager
def registered(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> Iterator[None]:
    """`table` readable as the view `name` on `con` for the block (registered outside
    any transaction, so a failed insert's rollback cannot leave it behind)."""
    con.register(name, table)
    try:
        yield
    finally:
        con.unregister(name)


def backup_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """What a backup is checked by: the rows of the tables it must carry whole."""
    return {
        table: con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
        for table in ("runs", "tokens", "quarantine")
    }


def sql_text(text: str) -> str:
    """`text` as an SQL string literal (COPY ... TO takes no parameters)."""
    return "'" + text.replace("'", "''") + "'"


def database_in_use(db_path: Path) -> bool:
    """Whether another process (a serving collector) holds the database file."""
    try:
        duckdb.connect(str(db_path)).close()
    except duckdb.IOException as exc:
        return "lock" in str(exc).lower()
    return False
