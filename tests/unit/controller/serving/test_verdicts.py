"""The verdict cache: refusals kept apart, expired entries swept, a hit refreshing its
place, and every miss within the process's review budget."""

from __future__ import annotations

import pytest

from controller.clock import FakeClock
from controller.serving.limits import Budget
from controller.serving.verdicts import OverBudget, ReviewUnavailable, VerdictCache


def asker(verdict: bool, ttl: float, asked: list[str], key: str):  # type: ignore[no-untyped-def]
    async def ask() -> tuple[bool, float]:
        asked.append(key)
        return verdict, ttl

    return ask


async def test_a_flood_of_refusals_does_not_push_out_acceptances() -> None:
    # 100,000 refusals held 40.5 MB and pushed real pods' verdicts out
    clock, asked = FakeClock(), []
    cache = VerdictCache[str, bool](clock, max_entries=3, max_refusals=2)
    for k in ("pod-a", "pod-b"):
        await cache.get(k, asker(True, 600, asked, k))
    for n in range(50):
        await cache.get(f"junk-{n}", asker(False, 10, asked, f"junk-{n}"))
    assert cache.refusals == 2 and len(cache) == 4
    before = len(asked)
    for k in ("pod-a", "pod-b"):
        assert await cache.get(k, asker(True, 600, asked, k)) is True
    assert len(asked) == before  # both still cached


async def test_expired_entries_are_swept_without_their_key_coming_back() -> None:
    clock, asked = FakeClock(), []
    cache = VerdictCache[str, bool](clock, sweep_interval=5)
    for n in range(100):
        await cache.get(f"junk-{n}", asker(False, 10, asked, f"junk-{n}"))
    assert cache.refusals == 100
    clock.advance(11)
    await cache.get("pod-a", asker(True, 600, asked, "pod-a"))
    assert len(cache) == 1 and cache.refusals == 0


async def test_a_hit_refreshes_its_place() -> None:
    clock, asked = FakeClock(), []
    cache = VerdictCache[str, bool](clock, max_entries=2)
    await cache.get("a", asker(True, 600, asked, "a"))
    await cache.get("b", asker(True, 600, asked, "b"))
    await cache.get("a", asker(True, 600, asked, "a"))  # a hit: a is the newest now
    await cache.get("c", asker(True, 600, asked, "c"))  # b, least recently used, goes
    assert asked == ["a", "b", "c"]
    await cache.get("a", asker(True, 600, asked, "a"))
    assert asked == ["a", "b", "c"]
    await cache.get("b", asker(True, 600, asked, "b"))
    assert asked == ["a", "b", "c", "b"]


async def test_misses_are_bounded_by_the_shared_budget() -> None:
    # 6,510 anonymous requests were 6,511 TokenReviews
    clock, asked = FakeClock(), []
    budget = Budget(clock, rate=2, burst=3)
    tokens = VerdictCache[str, bool](clock, budget=budget)
    access = VerdictCache[str, bool](clock, budget=budget)
    for n in range(3):
        await (tokens if n % 2 else access).get(f"k{n}", asker(False, 10, asked, f"k{n}"))
    with pytest.raises(OverBudget) as e:
        await tokens.get("k3", asker(False, 10, asked, "k3"))
    assert isinstance(e.value, ReviewUnavailable) and e.value.retry_after >= 0.5
    with pytest.raises(OverBudget):
        await access.get("k4", asker(False, 10, asked, "k4"))
    # a cached verdict costs nothing, budget or not
    assert await access.get("k0", asker(True, 10, asked, "k0")) is False
    clock.advance(0.5)
    await tokens.get("k3", asker(False, 10, asked, "k3"))
    assert asked == ["k0", "k1", "k2", "k3"] and budget.refused == 2
