"""Bind addresses ("host:port", ":port", "[::1]:port", "0" for off) and whether two of
them would be one socket.

Start-up checks must compare what the servers would bind, not the strings: two
addresses with port 0 are two ephemeral sockets however alike they read, while
":8081" and "0.0.0.0:8081" are one port that only one listener can hold. Pure: no
name is resolved; "localhost" stands for the loopback addresses it names on every
system we run on.
"""

from __future__ import annotations

import ipaddress
from enum import Enum

#: the value of an address flag that turns its server off (controller-runtime's)
OFF = "0"
#: hosts that bind every interface
_UNSPECIFIED = {"", "*", "0.0.0.0", "::"}
_LOOPBACK = frozenset({"127.0.0.1", "::1"})


class Sharing(Enum):
    APART = "apart"  # two sockets, each can be bound
    SAME = "same"  # one socket, named the same way: one server can serve both
    OVERLAP = "overlap"  # the same port on hosts that cover each other: the second fails


def parse_address(address: str) -> tuple[str | None, int]:
    """ ":8080" → (None, 8080) meaning all interfaces; "127.0.0.1:0" → ephemeral port."""
    host, sep, port = address.rpartition(":")
    if not sep:
        raise ValueError(f"bind address {address!r} has no port")
    host = host.strip("[]")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"bind address {address!r}: port {port!r} is not a number") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"bind address {address!r}: port {number} is out of range")
    return (host or None), number


def _hosts(host: str | None) -> frozenset[str] | None:
    """The interfaces a host binds: None for all of them."""
    name = (host or "").lower()
    if name in _UNSPECIFIED:
        return None
    if name == "localhost":
        return _LOOPBACK
    try:
        return frozenset({str(ipaddress.ip_address(name))})
    except ValueError:
        return frozenset({name})


def sharing(a: str, b: str) -> Sharing:
    """Whether bind addresses ``a`` and ``b`` would be one socket. Raises ValueError
    for an address that is not one."""
    if a == OFF or b == OFF:
        return Sharing.APART
    (host_a, port_a), (host_b, port_b) = parse_address(a), parse_address(b)
    if port_a == 0 or port_b == 0 or port_a != port_b:
        return Sharing.APART
    hosts_a, hosts_b = _hosts(host_a), _hosts(host_b)
    if hosts_a == hosts_b:
        return Sharing.SAME
    if hosts_a is None or hosts_b is None or hosts_a & hosts_b:
        return Sharing.OVERLAP
    return Sharing.APART
