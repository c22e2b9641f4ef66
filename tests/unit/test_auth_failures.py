"""Failed authentications are counted per address, however the peer reconnects."""

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
        ("unix:/tmp/socket", "unix"),
        ("", "unknown"),
    ],
)
def test_peers_are_keyed_by_address_not_connection(peer: str, key: str) -> None:
    assert peer_key(peer) == key


def test_a_peer_is_held_back_after_its_failures_and_others_are_not() -> None:
    failures = AuthFailures(per_minute=3)
    for _ in range(3):
        assert failures.wait_s("203.0.113.7") == 0
        failures.failed("203.0.113.7")
    assert 0 < failures.wait_s("203.0.113.7") <= 20.0  # one failure back every 20 s
    assert failures.wait_s("198.51.100.1") == 0
