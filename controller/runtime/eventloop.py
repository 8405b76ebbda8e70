"""The event loop the process runs on, and a gate on how often it wakes.

Why a gate: under a client-side rate limit the controller is idle most of the time, and
each watch event, answer and timer arrives at an instant of its own. In a VM a wake-up
from idle costs more CPU than the work it wakes for: caches and TLB come back cold
(controller.clock.on_tick has the figures). While traffic flows, a gated loop does not
block in the selector: it sleeps to the next multiple of ``gate`` and then takes
everything that arrived meanwhile in one poll, so a burst of a hundred events a second
wakes it twenty times, not a hundred. The first poll at the gate that finds nothing ends
that: the next wait blocks as usual, and an idle process is never woken by the gate.

The cost is latency: while traffic flows, what arrives (an answer, a watch event, a timer
that falls due) waits up to ``gate`` before it is handled. Callbacks that are ready run
at once; only a wait for I/O or time is gated.

uvloop polls inside libuv, where no gate can sit; the standard loop asks its selector,
which is where this one does. Its grid is the loop's own clock (``time.monotonic``),
shifted by ``OFFSET`` so that timers put on a tick (controller.clock.on_tick, a
multiple of the gate) are due when the gate opens, not one gate later.
"""

from __future__ import annotations

import asyncio
import math
import selectors
import time
from collections.abc import Callable
from typing import Any

from controller.clock import TICK_SLACK

#: The gate opens this long after each multiple of the gate: after the tick's timers,
#: which are due ``TICK_SLACK`` after theirs (controller.clock.on_tick).
OFFSET = 2 * TICK_SLACK
#: A timer due at most this share of a gate after an opening is waited for with it.
LATE_SHARE = 0.25


def gate_wait(now: float, gate: float) -> float:
    """Seconds from ``now`` to the next opening of a gate of ``gate`` seconds."""
    return math.ceil((now - OFFSET) / gate) * gate + OFFSET - now


class GatedSelector(selectors.DefaultSelector):
    """The platform's selector, gated (module doc). ``gate <= 0``: never gated.

    ``sleeps`` counts the waits the gate turned into sleeps.
    """

    def __init__(
        self,
        gate: float,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__()
        self.gate = gate
        self._monotonic = monotonic
        self._sleep = sleep
        self._flowing = False
        self.sleeps = 0

    def select(self, timeout: float | None = None) -> list[tuple[Any, int]]:
        if timeout is not None and timeout <= 0:
            # a poll between ready callbacks: neither a wait nor news of the traffic
            return super().select(0)
        if self._flowing and self.gate > 0:
            wait = gate_wait(self._monotonic(), self.gate)
            if timeout is not None and wait < timeout <= wait + self.gate * LATE_SHARE:
                # a timer set a moment after the last opening for a gate's time (a
                # batching delay, a pace) falls due just after this one: wait the moment
                # and run it now rather than a whole gate later
                wait = timeout
            if wait > 0:
                self._sleep(wait)
                self.sleeps += 1
            ready = super().select(0)
            # nothing came in a whole gate: back to blocking, once the loop has run
            # the timers that fell due meanwhile
            self._flowing = bool(ready)
            return ready
        ready = super().select(timeout)
        self._flowing = bool(ready)
        return ready


def loop_factory(kind: str, gate: float) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What anyio's asyncio backend builds its loop with: ``kind`` "asyncio" (the
    standard loop, gated by ``gate`` seconds; 0: not gated) or "uvloop" (never gated).
    None: the backend's default."""
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    if gate <= 0:
        return None
    return lambda: asyncio.SelectorEventLoop(GatedSelector(gate))
