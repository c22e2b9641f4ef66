"""The client's address behind a trusted proxy: x-forwarded-for believed from the proxy
only, and only its last address (the one the proxy added)."""

from __future__ import annotations

from gpubench.collector.forwarded import TrustedProxies, forwarded_for

PROXY = "ipv4:10.0.0.5:40000"


def test_only_a_trusted_peer_forwards_an_address() -> None:
    proxies = TrustedProxies(["10.0.0.5"])
    header = (("x-forwarded-for", "203.0.113.7"),)
    assert proxies.client_peer(PROXY, header) == "ipv4:203.0.113.7:0"
    assert proxies.client_peer("ipv4:198.51.100.1:1", header) == "ipv4:198.51.100.1:1"
    assert TrustedProxies([]).client_peer(PROXY, header) == PROXY
    assert proxies.client_peer(PROXY, ()) == PROXY  # nothing forwarded: the proxy itself


def test_the_last_address_is_the_proxys_own_word() -> None:
    forged = (("x-forwarded-for", "192.0.2.1, 192.0.2.2"), ("x-forwarded-for", "203.0.113.7"))
    assert str(forwarded_for(forged)) == "203.0.113.7"
    assert str(forwarded_for((("x-forwarded-for", "192.0.2.1, 2001:db8::1"),))) == "2001:db8::1"
    assert forwarded_for((("x-forwarded-for", "not an address"),)) is None


def test_networks_names_and_ipv6_peers() -> None:
    proxies = TrustedProxies(["10.0.0.0/24", "localhost"])
    header = (("x-forwarded-for", "2001:db8::1"),)
    assert proxies.client_peer(PROXY, header) == "ipv6:[2001:db8::1]:0"
    assert proxies.client_peer("ipv4:127.0.0.1:5", header) == "ipv6:[2001:db8::1]:0"
    assert proxies.client_peer("ipv4:10.0.1.5:5", header) == "ipv4:10.0.1.5:5"
    assert proxies.client_peer("unix:/tmp/s", header) == "unix:/tmp/s"
