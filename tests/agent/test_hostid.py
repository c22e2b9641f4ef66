"""The host's id: a keyed hash under a random key kept in the agent's state folder."""

from __future__ import annotations

import hashlib
import multiprocessing
import socket
import stat
from pathlib import Path

from gpubench.agent import hostid


def test_the_key_is_made_once_and_kept_private(tmp_path: Path) -> None:
    first = hostid.host_key(tmp_path)
    assert first.unstable == "" and len(first.key) == hostid.KEY_BYTES
    path = tmp_path / hostid.KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert hostid.host_key(tmp_path).key == first.key
    assert [p.name for p in tmp_path.iterdir()] == [hostid.KEY_FILE]  # no temporary left


def test_the_id_is_stable_per_host_and_not_the_plain_hash(tmp_path: Path) -> None:
    mine = hostid.host_key(tmp_path / "mine").key
    other = hostid.host_key(tmp_path / "other").key
    assert hostid.host_id(mine, "gpu01") == hostid.host_id(mine, "gpu01")
    assert hostid.host_id(mine, "gpu01") != hostid.host_id(mine, "gpu02")
    # Another host's key gives another id for the same name: a list of names and the
    # plain SHA-256 cannot find which name an id hides.
    assert hostid.host_id(mine, "gpu01") != hostid.host_id(other, "gpu01")
    assert hostid.host_id(mine, "gpu01") != hashlib.sha256(b"gpu01").hexdigest()
    assert hostid.host_id(mine) == hostid.host_id(mine, socket.gethostname())


def _key_of(folder: str) -> str:
    return hostid.host_key(Path(folder)).key.hex()


def test_agents_starting_together_agree_on_the_key(tmp_path: Path) -> None:
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        keys = pool.map(_key_of, [str(tmp_path)] * 8)
    assert len(set(keys)) == 1
    assert bytes.fromhex((tmp_path / hostid.KEY_FILE).read_text()).hex() == keys[0]


def test_a_folder_it_cannot_use_gives_a_key_for_this_run_and_says_so(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    found = hostid.host_key(blocked / "state")
    assert len(found.key) == hostid.KEY_BYTES
    assert found.unstable.startswith("cannot ") and "host-key" in found.unstable
    assert hostid.host_key(blocked / "state").key != found.key


def test_a_damaged_key_is_not_replaced(tmp_path: Path) -> None:
    (tmp_path / hostid.KEY_FILE).write_text("zz\n")
    found = hostid.host_key(tmp_path)
    assert "cannot read" in found.unstable
    assert (tmp_path / hostid.KEY_FILE).read_text() == "zz\n"  # left for a person to look at
