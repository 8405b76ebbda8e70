"""The gated selector: a wait while traffic flows becomes a sleep to the gate and one poll;
an idle wait blocks as usual."""

from __future__ import annotations

import asyncio
import selectors
import socket
from collections.abc import Iterator

import pytest
import uvloop

from controller.runtime.eventloop import OFFSET, GatedSelector, gate_wait, loop_factory


class _Time:
    def __init__(self, now: float) -> None:
        self.now = now
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def _selector(clock: _Time, sock: socket.socket, gate: float = 0.05) -> GatedSelector:
    sel = GatedSelector(gate, monotonic=clock.monotonic, sleep=clock.sleep)
    sel.register(sock, selectors.EVENT_READ)
    return sel


def _arrival(sel: GatedSelector, a: socket.socket, b: socket.socket) -> None:
    """Something arrives while the selector waits (or while the loop works), and is read."""
    a.send(b"x")
    assert [key.fileobj for key, _ in sel.select(None)] == [b]
    b.recv(100)


def test_the_gate_opens_on_its_grid_just_after_the_tick() -> None:
    assert gate_wait(10.0301, 0.05) == pytest.approx(10.051 - 10.0301)
    assert gate_wait(10.0511, 0.05) == pytest.approx(10.101 - 10.0511)
    # a timer on a 0.1 s tick is due half a millisecond after its multiple: the gate
    # opens after it, in the same wake-up
    assert 10.1 + 0.0005 < 10.0999 + gate_wait(10.0999, 0.05)
    assert OFFSET > 0.0005


def test_an_idle_wait_blocks_without_sleeping(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    clock = _Time(100.0)
    sel = _selector(clock, b)
    assert sel.select(0.01) == []  # nothing came: a real wait of its timeout
    a.send(b"x")
    assert [key.fileobj for key, _ in sel.select(1.0)] == [b]
    assert clock.slept == [] and sel.sleeps == 0


def test_while_traffic_flows_a_wait_sleeps_to_the_gate_and_polls_once(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    clock = _Time(100.0123)
    sel = _selector(clock, b)
    _arrival(sel, a, b)  # the first arrival wakes it
    a.send(b"second")  # arrives while it handles the first
    ready = sel.select(5.0)
    assert [key.fileobj for key, _ in ready] == [b]
    assert clock.slept == [pytest.approx(100.051 - 100.0123)] and sel.sleeps == 1
    b.recv(100)
    # the next gate finds nothing: one more sleep, then waits block again
    assert sel.select(5.0) == []
    assert len(clock.slept) == 2
    assert sel.select(0.01) == []
    assert len(clock.slept) == 2 and sel.sleeps == 2


def test_a_poll_between_ready_callbacks_neither_sleeps_nor_ends_the_flow(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    clock = _Time(100.0)
    sel = _selector(clock, b)
    _arrival(sel, a, b)
    assert sel.select(0) == [] and clock.slept == []
    a.send(b"y")
    assert len(sel.select(1.0)) == 1 and sel.sleeps == 1  # still flowing: gated


def test_a_gate_of_zero_never_sleeps(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    clock = _Time(100.0)
    sel = _selector(clock, b, gate=0.0)
    _arrival(sel, a, b)
    a.send(b"y")
    assert len(sel.select(1.0)) == 1
    assert clock.slept == [] and sel.sleeps == 0


def test_the_loop_factory_builds_the_chosen_loop() -> None:
    assert loop_factory("uvloop", 0.05) is uvloop.new_event_loop
    assert loop_factory("asyncio", 0.0) is None
    factory = loop_factory("asyncio", 0.05)
    assert factory is not None
    loop = factory()
    try:
        assert isinstance(loop, asyncio.SelectorEventLoop)
        assert isinstance(loop._selector, GatedSelector)  # type: ignore[attr-defined]
    finally:
        loop.close()


def test_a_gated_loop_reads_what_arrives_together_at_its_gates() -> None:
    """A real loop: three messages sent while it handles the first are read at one gate."""
    factory = loop_factory("asyncio", 0.05)
    assert factory is not None
    loop = factory()

    async def main() -> list[bytes]:
        a, b = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=b)
        got: list[bytes] = []
        try:
            a.send(b"1\n")
            got.append(await reader.readline())
            a.send(b"2\n3\n")
            a.send(b"4\n")
            chunk = await reader.read(100)
            got.append(chunk)
        finally:
            writer.close()
            a.close()
        return got

    try:
        got = loop.run_until_complete(main())
        sel: GatedSelector = loop._selector  # type: ignore[attr-defined]
        assert got == [b"1\n", b"2\n3\n4\n"]
        assert sel.sleeps >= 1
    finally:
        loop.close()


def test_a_timer_due_just_after_the_gate_is_waited_for_with_it(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """A delay set just after an opening, a gate long, falls due a moment after the next:
    the gate waits that moment instead of leaving it for the one after."""
    a, b = pair
    clock = _Time(100.0123)
    sel = _selector(clock, b)
    _arrival(sel, a, b)
    to_gate = 100.051 - 100.0123
    sel.select(to_gate + 0.004)  # due 4 ms after the gate opens
    assert clock.slept == [pytest.approx(to_gate + 0.004)]
    _arrival(sel, a, b)
    sel.select(gate_wait(clock.now, 0.05) + 0.03)  # due well into the next gate: not waited for
    assert clock.slept[-1] == pytest.approx(gate_wait(100.0123 + to_gate + 0.004, 0.05))
