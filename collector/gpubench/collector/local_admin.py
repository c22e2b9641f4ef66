"""Administering a running collector from the same machine.

DuckDB lets one process hold the database file, so while `serve` runs, token, backup
and import commands cannot open it. `serve` therefore makes a folder beside the
database, `<db>.admin/` (mode 0700, made afresh each start, removed on stop), holding
a Unix socket its gRPC server also listens on and a fresh secret the Admin service
takes as the collector's own admin; those commands, finding the database locked, call
the collector through that socket. Only the database's owner (and root) can enter the
folder; whoever can read the database file's folder can administer the collector
either way.
"""

from __future__ import annotations

import builtins  # LiveCollector has a method named list
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpubench.client import Client
from gpubench.collector.tokens import TokenRow
from gpubench.errors import AccessDenied, CollectorUnavailable, RequestRefused
from gpubench.v1 import collector_pb2, run_pb2

CALL_TIMEOUT_S = 30.0
# A backup writes the whole database: minutes for a large one.
BACKUP_TIMEOUT_S = 3600.0
# The folder's entries: short, since a Unix socket's path has at most 107 bytes.
SOCKET = "socket"
SECRET = "secret"
# Where the socket is reached from when the folder's own path is too long for one: a
# link in a private folder under the system's temporary folder (ALIAS names it).
ALIAS = "alias"
MAX_SOCKET_PATH = 107


@dataclass(frozen=True)
class Credential:
    """Where the live collector listens for local administration, and its secret."""

    address: str  # "unix:/path/to/db.admin/socket"
    secret: str


def admin_folder(db_path: Path) -> Path:
    """The local administration folder of the collector serving `db_path`."""
    db_path = Path(db_path)
    return db_path.with_name(db_path.name + ".admin")


def open_folder(db_path: Path, secret: str) -> str:
    """Make the admin folder afresh (a stale one is replaced) with `secret` in it, and
    return the address of the socket the server is to listen on."""
    folder = admin_folder(db_path)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(mode=0o700)
    folder.chmod(0o700)  # whatever the umask
    fd = os.open(folder / SECRET, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secret)
    socket = folder.resolve() / SOCKET
    if len(os.fsencode(socket)) > MAX_SOCKET_PATH:
        # A database deep in the tree: the socket is bound through a short link to the
        # folder (the folder's 0700 still guards it), named in the folder for `read`.
        private = Path(tempfile.mkdtemp(prefix="gpubench-admin-"))  # 0700
        (private / "d").symlink_to(folder.resolve(), target_is_directory=True)
        (folder / ALIAS).write_text(str(private))
        socket = private / "d" / SOCKET
    return f"unix:{socket}"


def _socket(folder: Path) -> Path:
    """The path the socket of `folder` is reached by: through its alias where it has one."""
    try:
        return Path((folder / ALIAS).read_text().strip()) / "d" / SOCKET
    except FileNotFoundError:
        return folder / SOCKET


def read(db_path: Path) -> Credential:
    """The live collector's admin socket and secret, or a GpubenchError saying why
    there is none."""
    folder = admin_folder(db_path)
    try:
        secret = (folder / SECRET).read_text().strip()
    except FileNotFoundError as exc:
        raise CollectorUnavailable(
            f"{folder}: missing; the database is locked by another process, but no "
            "collector serving it made its admin folder"
        ) from exc
    except PermissionError as exc:
        raise AccessDenied(f"{folder}: not readable by this user (the collector's "
                           "owner administers it)") from exc
    return Credential(f"unix:{_socket(folder)}", secret)


def remove(db_path: Path) -> None:
    """Remove the admin folder (on stop), and the short link to it if it had one."""
    folder = admin_folder(db_path)
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(Path((folder / ALIAS).read_text().strip()), ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)


def _token_row(token: collector_pb2.Token) -> TokenRow:
    last_used = token.last_used_at.ToDatetime() if token.HasField("last_used_at") else None
    return TokenRow(
        token.name, token.admin, token.created_at.ToDatetime(), token.revoked, last_used
    )


class LiveCollector:
    """Token administration, backups and run import through a running collector, over
    its admin socket (the same methods as the Store's, for the commands that use either)."""

    def __init__(self, credential: Credential) -> None:
        self._client = Client(credential.address, token=credential.secret, timeout=CALL_TIMEOUT_S)

    @classmethod
    @contextlib.contextmanager
    def for_database(cls, db_path: Path) -> Iterator[LiveCollector]:
        """The collector serving `db_path`, through its admin socket."""
        live = cls(read(db_path))
        try:
            yield live
        finally:
            live._client.close()

    def create(self, name: str, *, admin: bool) -> tuple[TokenRow, str]:
        """A new token and its secret (shown once)."""
        reply = self._client.create_token(name, admin=admin)
        return _token_row(reply.token), reply.secret

    def list(self) -> list[TokenRow]:
        """Every token."""
        return [_token_row(t) for t in self._client.list_tokens()]

    def revoke(self, name: str) -> TokenRow:
        """Revoke a token by name."""
        return _token_row(self._client.revoke_token(name))

    def backup(self, folder: Path) -> collector_pb2.BackupResponse:
        """Have the collector back its database up into `folder` (absolute, on this
        machine), with a deadline of BACKUP_TIMEOUT_S: a large database takes a while."""
        return self._client.backup(str(folder), timeout=BACKUP_TIMEOUT_S)

    def submit_many(self, runs: builtins.list[run_pb2.Run], submitter: str
                    ) -> builtins.list[collector_pb2.SubmitRunResponse | RequestRefused]:
        """Submit runs one at a time (validated and stored by the live collector, as its
        own admin's: `submitter` is the direct import's); per run its answer, or the
        refusal of a run_id stored with other content."""
        results: list[collector_pb2.SubmitRunResponse | RequestRefused] = []
        for run in runs:
            try:
                results.append(self._client.submit_run(run))
            except RequestRefused as exc:
                if getattr(exc, "status_code", "") != "ALREADY_EXISTS":
                    raise
                results.append(exc)
        return results
