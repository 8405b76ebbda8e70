"""The pacer: one paced action per key per interval, bounded memory."""

from __future__ import annotations

import pytest

from controller.clock import FakeClock
from controller.runtime.pacer import Pacer, SlotGate


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


def test_a_slot_gate_spaces_keys_and_each_comes_back_once() -> None:
    clock = FakeClock()
    gate = SlotGate[str](clock, rate=10.0)
    assert gate.reserve("a") == 0.0
    # the next ones get slots of their own, 0.1 s apart, and keep them
    waits = [gate.reserve(k) for k in "bcd"]
    assert waits == pytest.approx([0.1, 0.2, 0.3])
    assert gate.reserve("c") == pytest.approx(0.2)  # asked again early: the same slot
    assert len(gate) == 3
    clock.advance(0.2)
    assert gate.reserve("b") == 0.0 and gate.reserve("c") == 0.0
    assert gate.reserve("d") == pytest.approx(0.1)
    # a newcomer goes after every slot given out
    assert gate.reserve("e") == pytest.approx(0.2)


def test_a_lapsed_slot_goes_to_the_back_and_forget_frees_it() -> None:
    clock = FakeClock()
    gate = SlotGate[str](clock, rate=1.0, grace=5.0)
    gate.reserve("a")
    assert gate.reserve("b") == pytest.approx(1.0)
    clock.advance(10)  # b never came back in time
    assert gate.reserve("b") == 0.0  # the gate is free by now: a new slot, at once
    assert gate.reserve("c") == pytest.approx(1.0)
    gate.forget("c")
    assert len(gate) == 0
    with pytest.raises(ValueError):
        SlotGate[str](clock, rate=0)


def test_a_held_slot_says_when_to_look_again() -> None:
    clock = FakeClock()
    gate = SlotGate[str](clock, rate=2.0)
    gate.reserve("a")
    gate.reserve("b")
    assert gate.held("b") == pytest.approx(0.5) and gate.held("a") == 0.0
    clock.advance(0.6)
    assert gate.held("b") == 0.0
