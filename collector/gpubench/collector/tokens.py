"""Access tokens in the database's tokens table: created, listed, looked up, revoked.

Only a token's name, flags and the SHA-256 of its secret are stored, never the secret
(collector.auth hashes it and keeps a cache in front of these lookups). Lookups read
without a lock; changes take the database's write lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gpubench.collector.database import Database, transaction
from gpubench.collector.errors import TokenExists
from gpubench.collector.rows import utc_now
from gpubench.errors import NotFound

_COLUMNS = "name, admin, created_at, revoked, last_used_at, secret_sha256"


@dataclass(frozen=True)
class TokenRow:
    """A stored access token (never the secret, only its hash)."""

    name: str
    admin: bool
    created_at: datetime
    revoked: bool
    last_used_at: datetime | None
    secret_sha256: str = ""


class Tokens:
    """The tokens table of `database`."""

    def __init__(self, database: Database) -> None:
        self._db = database

    def create(self, name: str, secret_sha256: str, admin: bool) -> TokenRow:
        """Store a new token; a revoked token of the same name is replaced. TokenExists if live."""
        with self._db.write_lock:
            con = self._db.cursor()
            rows = con.execute("SELECT revoked FROM tokens WHERE name = ?", [name]).fetchall()
            if rows and not rows[0][0]:
                raise TokenExists(f"token {name!r}: already exists (revoke it first)")
            now = utc_now()
            with transaction(con):
                con.execute("DELETE FROM tokens WHERE name = ?", [name])
                con.execute(
                    "INSERT INTO tokens (name, secret_sha256, admin, created_at, revoked) "
                    "VALUES (?, ?, ?, ?, false)",
                    [name, secret_sha256, admin, now],
                )
            return TokenRow(name, admin, now, False, None, secret_sha256)

    def all(self) -> list[TokenRow]:
        """Every token, by name."""
        rows = self._db.cursor().execute(f"SELECT {_COLUMNS} FROM tokens ORDER BY name").fetchall()
        return [TokenRow(*r) for r in rows]

    def by_secret_hash(self, secret_sha256: str) -> TokenRow | None:
        """The token whose secret hashes to `secret_sha256`, revoked or not."""
        rows = self._db.cursor().execute(
            f"SELECT {_COLUMNS} FROM tokens WHERE secret_sha256 = ?", [secret_sha256]
        ).fetchall()
        return TokenRow(*rows[0]) if rows else None

    def revoke(self, name: str) -> TokenRow:
        """Mark a token revoked; NotFound if there is none of that name."""
        with self._db.write_lock:
            rows = self._db.cursor().execute(
                f"UPDATE tokens SET revoked = true WHERE name = ? RETURNING {_COLUMNS}", [name]
            ).fetchall()
        if not rows:
            raise NotFound(f"token {name!r}: no such token")
        return TokenRow(*rows[0])

    def record_use(self, used: dict[str, datetime]) -> None:
        """Write tokens' last-used times (the auth layer batches them)."""
        if not used:
            return
        with self._db.write_lock:
            self._db.cursor().executemany(
                "UPDATE tokens SET last_used_at = ? WHERE name = ?",
                [[when, name] for name, when in used.items()],
            )
