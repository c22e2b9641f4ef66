"""The host's id in run records: a keyed hash of the hostname, never the name itself.

A plain SHA-256 of a hostname is reversed by hashing a list of likely names ("gpu01",
"dgx-a100-3", ...). The id is instead HMAC-SHA256 of the hostname under a random key
made once per host and kept in the agent's state folder ($GPUBENCH_STATE, else
$XDG_STATE_HOME/gpubench, else ~/.local/state/gpubench): the same host gives the same id
run after run, and nobody without the key can tell which name it hides.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

STATE_ENV = "GPUBENCH_STATE"
KEY_FILE = "host-key"
KEY_BYTES = 32


def state_dir() -> Path:
    """The agent's state folder: $GPUBENCH_STATE, else $XDG_STATE_HOME/gpubench
    (~/.local/state/gpubench)."""
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV]).expanduser()
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home).expanduser() / "gpubench"


@dataclass(frozen=True)
class HostKey:
    """The host's key, and why it will not be the same next time (empty: it will)."""

    key: bytes
    unstable: str = ""


def host_key(folder: Path | None = None) -> HostKey:
    """The host's key from `folder` (default: state_dir()), made on first use: random,
    readable by its owner only, written so that two agents starting at once agree on
    it. Where it cannot be kept, a key for this run only, and why."""
    path = (folder or state_dir()) / KEY_FILE
    try:
        return HostKey(_read(path))
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        return HostKey(secrets.token_bytes(KEY_BYTES), f"cannot read {path} ({exc})")
    key = secrets.token_bytes(KEY_BYTES)
    # Written whole under a name of its own, then linked into place: a second agent
    # starting at once finds either no key or all of one, and link() refuses to replace
    # the first one's.
    tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(key.hex() + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.link(tmp, path)
    except FileExistsError:  # another agent made it first: its key is the host's
        return HostKey(_read(path))
    except OSError as exc:
        return HostKey(key, f"cannot write {path} ({exc.strerror or exc})")
    finally:
        tmp.unlink(missing_ok=True)
    return HostKey(key)


def _read(path: Path) -> bytes:
    key = bytes.fromhex(path.read_text().strip())
    if len(key) != KEY_BYTES:
        raise ValueError(f"not {KEY_BYTES} bytes of hex")
    return key


def host_id(key: bytes, hostname: str | None = None) -> str:
    """HMAC-SHA256 of the hostname (default: this host's) under `key`, in hex."""
    name = socket.gethostname() if hostname is None else hostname
    return hmac.new(key, name.encode(), hashlib.sha256).hexdigest()
