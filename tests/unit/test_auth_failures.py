"""Failed authentications are counted per address, however the peer reconnects, spent at
the moment each call is decided, and never touch other addresses."""

from __future__ import annotations

import pytest

from gpubench.collector.auth import AuthFailures, peer_key


@pytest.mark.parametrize(
    ("peer", "key"),
    [
        ("ipv4:203.0.113.7:50123", "203.0.113.7"),
        ("ipv6:[::1]:50123", "::1"),
        ("ipv6:[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::/64"),
        ("ipv6:[2001:db8:1:2:ffff::9]:1", "2001:db8:1:2::/64"),
        ("ipv6:[::ffff:203.0.113.7]:1", "203.0.113.7"),
        ("unix:/tmp/socket", "unix"),
        ("", "unknown"),
    ],
)
def test_peers_are_keyed_by_address_not_connection(peer: str, key: str) -> None:
    assert peer_key(peer) == key


def test_the_budget_is_taken_as_each_call_is_decided_and_other_addresses_keep_theirs() -> None:
    failures = AuthFailures(per_minute=3)
    # Three calls in flight together take the three failures; the fourth is refused
    # before its token is checked, with the wait for one to come back (one every 20 s).
    assert [failures.admit("203.0.113.7") for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = failures.admit("203.0.113.7")
    assert 19.0 < wait <= 20.0
    assert failures.admit("198.51.100.1") == 0.0
    assert failures.refused == 1


def test_a_valid_token_gives_its_failure_back() -> None:
    failures = AuthFailures(per_minute=1)
    assert failures.admit("203.0.113.7") == 0.0
    failures.forgive("203.0.113.7")  # it was valid
    assert failures.admit("203.0.113.7") == 0.0
    assert failures.admit("203.0.113.7") > 0.0


def test_known_tokens_are_the_valid_ones_and_follow_changes(tmp_path) -> None:
    from gpubench.collector.auth import TokenBook
    from gpubench.collector.store import Store

    store = Store(tmp_path / "c.duckdb")
    try:
        tokens = TokenBook(store, local_admin_secret="gpb_local")
        _, alice = tokens.create("alice", admin=False)
        assert tokens.known(alice) and tokens.known("gpb_local")
        assert not tokens.known("gpb_guess")
        tokens.revoke("alice")
        assert not tokens.known(alice)
        _, bob = tokens.create("bob", admin=True)
        assert tokens.known(bob)
    finally:
        store.close()
