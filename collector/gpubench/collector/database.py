"""The collector's DuckDB file: the one connection, a cursor per thread, the write lock,
opening again after a fatal error.

DuckDB cursors are connections of their own to the same database, safe side by side,
one per thread. Reads need no lock: each statement reads what was committed when it
began (DuckDB's MVCC). Writes take `write_lock`, so that concurrent RPCs never conflict
(DuckDB's optimistic concurrency refuses the second of two changes of one row).

The runs change only through the store, which counts each change that committed
(`generation`); answers computed from the runs are kept until the next
(`UntilChanged`): a community's collector is read far more often than written.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import TypeVar

import duckdb

from gpubench.collector.durability import storage_error
from gpubench.collector.errors import DatabaseLocked, ShuttingDown, StorageUnavailable

log = logging.getLogger(__name__)


def _usable_cores() -> int:
    # DuckDB sizes its thread pool by the machine's cores; a container's CPU set or
    # `taskset` may allow fewer, and more threads than cores only contend.
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


class Database:
    """The DuckDB file at `path`, opened and migrated; safe to share between threads.

    `migrate(connection, path)` brings the schema up to date when it opens
    (collector.migrations.apply: given by the store, so that this module, which every
    part of the store uses, does not import every migration's code).
    """

    def __init__(self, path: Path,
                 migrate: Callable[[duckdb.DuckDBPyConnection, Path], None]) -> None:
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
        # How many changes of the runs have committed (Store: before it acknowledges).
        self.generation = 0
        self.closed = False
        try:
            migrate(self._conn, path)
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
    def read(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """This thread's cursor for a read; a failure of the storage raised as StorageFull
        or StorageUnavailable (retryable), a broken database noted for opening again."""
        try:
            yield self.cursor()
        except Exception as exc:
            if isinstance(exc, duckdb.FatalException):
                self.broken = True  # the next write, or the store's retry, opens it again
            error = storage_error(exc, f"reading {self.path}")
            if error is None:
                raise
            raise error from exc

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

    def applied_migrations(self) -> list[str]:
        """The names of the migrations this database has had, in order applied."""
        rows = self.cursor().execute(
            "SELECT name FROM schema_migrations ORDER BY applied_at, name"
        ).fetchall()
        return [name for (name,) in rows]


Answer = TypeVar("Answer")


class UntilChanged:
    """Answers computed from the runs, each kept until the runs change (the database's
    generation moves on), the `size` most recently used; safe to share between threads.

    A read asks for `generation` before it begins, so an answer is never filed under a
    generation later than the snapshot it was computed from: a run acknowledged before
    a read began (its commit counted) is in every answer that read gets.
    """

    def __init__(self, database: Database, size: int = 256) -> None:
        self._db = database
        self._size = size
        self._lock = threading.Lock()
        self._answers: OrderedDict[Hashable, tuple[int, object]] = OrderedDict()

    def get(self, key: Hashable, compute: Callable[[], Answer]) -> Answer:
        """The answer kept for `key` at this generation, else `compute()`'s, kept."""
        generation = self._db.generation
        with self._lock:
            kept = self._answers.get(key)
            if kept is not None and kept[0] == generation:
                self._answers.move_to_end(key)
                return kept[1]  # type: ignore[return-value]
        answer = compute()
        with self._lock:
            self._answers[key] = (generation, answer)
            self._answers.move_to_end(key)
            while len(self._answers) > self._size:
                self._answers.popitem(last=False)
        return answer


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


def backup_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """What a backup is checked by: the rows of the tables it must carry whole."""
    return {
        table: con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
        for table in ("runs", "tokens")
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
