"""Bind addresses compared as the sockets they would be, not as strings."""

from __future__ import annotations

import pytest

from controller.observability.addresses import Sharing, parse_address, sharing


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        # each port 0 is an ephemeral socket of its own, however alike the strings
        pytest.param("127.0.0.1:0", "127.0.0.1:0", Sharing.APART, id="port-0-twice"),
        pytest.param(":0", ":0", Sharing.APART, id="port-0-all-interfaces"),
        pytest.param(":0", ":8081", Sharing.APART, id="port-0-and-a-port"),
        pytest.param("0", "0", Sharing.APART, id="both-off"),
        pytest.param("0", ":8081", Sharing.APART, id="one-off"),
        pytest.param(":8443", ":8081", Sharing.APART, id="defaults"),
        pytest.param("127.0.0.1:9", "127.0.0.2:9", Sharing.APART, id="two-hosts"),
        pytest.param("127.0.0.1:9", "[::1]:9", Sharing.APART, id="v4-and-v6-loopback"),
        pytest.param("10.0.0.1:9", "localhost:9", Sharing.APART, id="an-ip-and-localhost"),
        pytest.param(":9", ":9", Sharing.SAME, id="same-port-all-interfaces"),
        pytest.param(":9", "0.0.0.0:9", Sharing.SAME, id="two-spellings-of-any"),
        pytest.param("[::]:9", "*:9", Sharing.SAME, id="v6-any-and-star"),
        pytest.param("127.0.0.1:9", "127.0.0.1:9", Sharing.SAME, id="same-host-and-port"),
        pytest.param("[::1]:9", "[0:0::1]:9", Sharing.SAME, id="one-ip-two-spellings"),
        pytest.param("LocalHost:9", "localhost:9", Sharing.SAME, id="names-ignore-case"),
        pytest.param(":9", "127.0.0.1:9", Sharing.OVERLAP, id="any-covers-a-host"),
        pytest.param("[::]:9", "10.1.2.3:9", Sharing.OVERLAP, id="v6-any-covers-v4"),
        pytest.param("localhost:9", "127.0.0.1:9", Sharing.OVERLAP, id="localhost-covers-loopback"),
    ],
)
def test_sharing(a: str, b: str, expected: Sharing) -> None:
    assert sharing(a, b) is expected
    assert sharing(b, a) is expected


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("8080", "has no port"),
        ("host:http", "is not a number"),
        (":70000", "out of range"),
        (":-1", "out of range"),
    ],
)
def test_not_an_address(address: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_address(address)
    with pytest.raises(ValueError, match=message):
        sharing(address, ":9")
