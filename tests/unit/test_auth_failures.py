"""Failed authentications are counted per address, however the peer reconnects, and only
ever slow the failing calls down."""

from __future__ import annotations

import pytest

from gpubench.collector.auth import HELD_PER_PEER, HELD_TOTAL, MAX_HOLD_S, AuthFailures, peer_key


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


def test_failures_past_the_allowance_are_held_and_other_addresses_are_not() -> None:
    failures = AuthFailures(per_minute=3)
    assert [failures.failed("203.0.113.7") for _ in range(3)] == [0.0, 0.0, 0.0]
    held = failures.failed("203.0.113.7")
    # One failure back every 20 s: held until then, at most MAX_HOLD_S.
    assert held == MAX_HOLD_S
    assert failures.failed("198.51.100.1") == 0.0
    assert failures.held == 1


def test_held_answers_are_bounded_per_address_and_in_all() -> None:
    failures = AuthFailures(per_minute=1)
    for _ in range(1 + HELD_PER_PEER):  # the allowance, then as many as may be held
        failures.failed("203.0.113.7")
    assert failures.failed("203.0.113.7") == 0.0  # past the cap: answered at once
    assert failures.held == HELD_PER_PEER and failures.answered_at_once == 1
    peers = [f"198.51.100.{i}" for i in range(HELD_TOTAL)]
    for peer in peers:
        failures.failed(peer)
        failures.failed(peer)
    assert failures.held == HELD_TOTAL  # the others' holds, up to the cap in all
