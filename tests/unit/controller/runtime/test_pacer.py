"""The pacer: one paced action per key per interval, bounded memory."""

from __future__ import annotations

import pytest

from controller.clock import FakeClock
from controller.runtime.pacer import Pacer


def test_a_key_acts_at_most_once_per_interval() -> None:
    clock = FakeClock()
    pacer = Pacer[str](clock, 0.25)
    assert pacer.delay("a") == 0.0
    pacer.mark("a")
    assert pacer.delay("a") == pytest.approx(0.25)
    assert pacer.delay("b") == 0.0  # keys are paced apart
    clock.advance(0.1)
    assert pacer.delay("a") == pytest.approx(0.15)
    clock.advance(0.15)
    assert pacer.delay("a") == 0.0
    pacer.mark("a")
    pacer.forget("a")
    assert pacer.delay("a") == 0.0


def test_memory_is_bounded_to_keys_still_within_their_interval() -> None:
    clock = FakeClock()
    pacer = Pacer[str](clock, 1.0, max_keys=3)
    for key in ("a", "b", "c"):
        pacer.mark(key)
    clock.advance(2)
    pacer.mark("d")  # over the bound: the stale keys go, the fresh one stays
    assert len(pacer) == 1 and pacer.delay("d") == pytest.approx(1.0)
