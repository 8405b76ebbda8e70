from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from controller.client.flowcontrol import PRIORITY_HIGH, PRIORITY_NORMAL, TokenBucket
from controller.clock import FakeClock, on_tick
from controller.queue.ratelimit import (
    BucketRateLimiter,
    ItemExponentialRateLimiter,
    MaxOfRateLimiter,
    default_controller_rate_limiter,
)


@pytest.mark.parametrize(
    ("base", "cap", "calls", "expected"),
    [
        pytest.param(0.005, 1000.0, 4, [0.005, 0.01, 0.02, 0.04], id="doubles-from-base"),
        pytest.param(1.0, 3.0, 4, [1.0, 2.0, 3.0, 3.0], id="capped-at-max"),
    ],
)
def test_item_exponential(base: float, cap: float, calls: int, expected: list[float]) -> None:
    limiter = ItemExponentialRateLimiter[str](base, cap)
    assert [limiter.when("a") for _ in range(calls)] == pytest.approx(expected)
    assert limiter.num_requeues("a") == calls
    assert limiter.when("b") == pytest.approx(base), "items are tracked separately"
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == pytest.approx(base)


def test_item_exponential_survives_huge_failure_counts() -> None:
    limiter = ItemExponentialRateLimiter[str](0.005, 1000.0)
    delays = [limiter.when("x") for _ in range(5000)]
    assert delays[-1] == 1000.0
    assert max(delays) == 1000.0


def test_token_bucket_burst_then_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)
    clock.advance(1.0)  # repays the debt of 2 and refills 3 (capped at burst)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]


def test_token_bucket_disabled_when_qps_not_positive() -> None:
    bucket = TokenBucket(qps=0, burst=1, clock=FakeClock())
    assert not bucket.enabled
    assert {bucket.reserve() for _ in range(1000)} == {0.0}


def test_bucket_limiter_is_global_not_per_item() -> None:
    limiter = BucketRateLimiter[str](qps=1, burst=1, clock=FakeClock())
    assert limiter.when("a") == 0.0
    assert limiter.when("b") == pytest.approx(1.0)
    assert limiter.num_requeues("a") == 0


def test_max_of_takes_longest_and_fans_out_forget() -> None:
    clock = FakeClock()
    limiter = MaxOfRateLimiter[str](
        ItemExponentialRateLimiter[str](1.0, 100.0), BucketRateLimiter[str](1, 1, clock)
    )
    assert limiter.when("a") == pytest.approx(1.0)  # per-item wins over a full bucket
    assert limiter.when("b") == pytest.approx(1.0)  # bucket debt equals per-item base
    assert limiter.when("a") == pytest.approx(2.0)
    assert limiter.num_requeues("a") == 2
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0


def test_default_controller_limiter_shape() -> None:
    limiter = default_controller_rate_limiter(FakeClock())
    # burst of 100 is free, so the per-item delay rules the first retries
    assert [limiter.when("k") for _ in range(3)] == pytest.approx([0.005, 0.01, 0.02])
    for i in range(200):
        limiter.when(f"other-{i}")
    # the bucket is now in debt: a fresh item waits on the global rate, not its own
    assert limiter.when("fresh") > 1.0


# --- priority acquire -----------------------------------------------------------------


async def _settle() -> None:
    await anyio.wait_all_tasks_blocked()


def _acquirer(
    bucket: TokenBucket, done: list[Any], stamp: Callable[[], Any]
) -> Callable[[], Awaitable[None]]:
    """A request that takes a token, then notes ``stamp()`` in ``done``."""

    async def one() -> None:
        await bucket.acquire()
        done.append(stamp())

    return one


def _requester(
    bucket: TokenBucket, done: list[Any], stamp: Callable[[str], Any] = lambda name: name
) -> Callable[[str, int], Awaitable[None]]:
    """A named request at a priority that takes a token, then notes ``stamp(name)``."""

    async def req(name: str, priority: int) -> None:
        await bucket.acquire(priority)
        done.append(stamp(name))

    return req


def _assert_within_rate(grants: list[float], qps: float, burst: int) -> None:
    """Every window [t0, t1] holds at most burst + qps·(t1 - t0) grants."""
    for i, t0 in enumerate(grants):
        for j in range(i, len(grants)):
            assert j - i + 1 <= burst + qps * (grants[j] - t0) + 1e-6


async def test_acquire_takes_burst_at_once_then_waits() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=2, clock=clock)
    await bucket.acquire()
    await bucket.acquire()
    done: list[int] = []
    one = _acquirer(bucket, done, lambda: 1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(one)
        await _settle()
        assert done == [] and bucket.waiting == 1
        clock.advance(0.099)
        await _settle()
        assert done == []
        clock.advance(0.001)
        await _settle()
        assert done == [1]


async def test_high_priority_jumps_ahead_of_waiting_normal_ones() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=1, clock=clock)
    await bucket.acquire()  # the bucket is empty now
    order: list[str] = []
    req = _requester(bucket, order)

    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(req, f"create{i}", PRIORITY_NORMAL)
            await _settle()
        tg.start_soon(req, "status", PRIORITY_HIGH)
        await _settle()
        assert bucket.waiting == 6
        clock.advance(0.1)  # one token
        await _settle()
        assert order == ["status"]
        tg.start_soon(req, "status2", PRIORITY_HIGH)
        await _settle()
        for _ in range(6):
            clock.advance(0.1)
            await _settle()
    # high first; equal priorities keep their arrival order
    creates = [f"create{i}" for i in range(5)]
    assert order == ["status", "status2", *creates]


@pytest.mark.parametrize("reserve", [0, 3])
async def test_priorities_never_exceed_qps_or_burst(reserve: int) -> None:
    clock = FakeClock()
    qps, burst, n = 20.0, 10, 60
    bucket = TokenBucket(qps=qps, burst=burst, clock=clock, high_reserve=reserve)
    start = clock.monotonic()
    grants: list[float] = []
    req = _requester(bucket, grants, lambda _: clock.monotonic() - start)

    async with anyio.create_task_group() as tg:
        for i in range(n):
            # a mix, with high-priority requests arriving all the time
            tg.start_soon(req, "", PRIORITY_HIGH if i % 3 == 0 else PRIORITY_NORMAL)
        await _settle()
        late = 0
        while len(grants) < n:
            clock.advance(0.02)
            await _settle()
            if late < 5 and len(grants) > n // 2:
                tg.start_soon(req, "", PRIORITY_HIGH)  # late arrivals, while many wait
                late += 1
                n += 1
    assert len(grants) == n
    _assert_within_rate(grants, qps, burst)
    # and the bucket was kept busy: the last grant is when the rate says it is due (the
    # last are normal requests, which lose the reserve's share of the burst)
    assert grants[-1] == pytest.approx((n - burst + reserve) / qps, abs=0.03)


async def test_a_reserve_is_left_for_high_priority_requests() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=5, clock=clock, high_reserve=2)
    done: list[str] = []
    req = _requester(bucket, done)

    async with anyio.create_task_group() as tg:
        for i in range(4):
            tg.start_soon(req, f"normal{i}", PRIORITY_NORMAL)
        await _settle()
        assert done == ["normal0", "normal1", "normal2"]  # the burst less the reserve
        for i in range(3):
            tg.start_soon(req, f"high{i}", PRIORITY_HIGH)
        await _settle()
        # the reserve goes at once, ahead of the normal request already waiting
        assert done[3:] == ["high0", "high1"] and bucket.waiting == 2
        clock.advance(0.1)
        await _settle()
        assert done[5:] == ["high2"]
        # a normal request waits for a token beyond the refilled reserve
        clock.advance(0.2)
        await _settle()
        assert done[6:] == []
        clock.advance(0.1)
        await _settle()
        assert done[6:] == ["normal3"]


async def test_a_high_request_behind_normal_waiters_gets_the_next_token() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=8, clock=clock, high_reserve=4)
    done: list[tuple[str, float]] = []
    start = clock.monotonic()
    req = _requester(bucket, done, lambda name: (name, round(clock.monotonic() - start, 3)))

    async with anyio.create_task_group() as tg:
        for i in range(4):
            tg.start_soon(req, f"normal{i}", PRIORITY_NORMAL)
        for i in range(4):
            tg.start_soon(req, f"high{i}", PRIORITY_HIGH)
        await _settle()
        assert len(done) == 8  # the bucket is empty; the timer waits for 5 tokens
        tg.start_soon(req, "normal-late", PRIORITY_NORMAL)
        await _settle()
        clock.advance(0.05)
        await _settle()
        tg.start_soon(req, "high-late", PRIORITY_HIGH)
        await _settle()
        # due at 0.1 s, not when the normal request's token beyond the reserve is
        while clock.next_deadline() is not None and len(done) < 9:
            clock.advance(clock.next_deadline() - clock.monotonic())  # type: ignore[operator]
            await _settle()
        assert done[8] == ("high-late", 0.1)
        clock.advance(0.5)
        await _settle()
    assert done[9] == ("normal-late", 0.6)


async def test_a_cancelled_waiter_does_not_stall_the_others() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=1, clock=clock)
    await bucket.acquire()
    done: list[str] = []
    first = anyio.CancelScope()

    async def req(name: str, scope: anyio.CancelScope | None = None) -> None:
        with scope or anyio.CancelScope():
            await bucket.acquire()
            done.append(name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(req, "never", first)  # the first waiter: it keeps the timer
        await _settle()
        tg.start_soon(req, "a")
        tg.start_soon(req, "b")
        await _settle()
        first.cancel()
        await _settle()
        assert bucket.waiting == 2
        for _ in range(2):
            clock.advance(0.1)
            await _settle()
    assert done == ["a", "b"]


async def test_a_ticking_bucket_releases_its_waiters_together_on_the_tick() -> None:
    # FakeClock starts at 1000.0, on the 0.1 s grid
    clock = FakeClock()
    bucket = TokenBucket(qps=20, burst=2, clock=clock, tick=0.1)
    await bucket.acquire()  # the burst: at once, tick or not
    await bucket.acquire()
    done: list[float] = []
    one = _acquirer(bucket, done, clock.monotonic)

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(one)
        await _settle()
        # without the tick the first token is due at +0.05: it waits for the tick
        clock.advance(0.05)
        await _settle()
        assert done == []
        clock.advance(0.0501)  # a hair past the tick: clock readings are floats
        await _settle()
        assert done == [pytest.approx(1000.1, abs=1e-3)] * 2, "two tokens accrued by the tick"
        clock.advance(0.098)
        await _settle()
        assert len(done) == 2
        clock.advance(0.002)
        await _settle()
        assert done[2:] == [pytest.approx(1000.2, abs=1e-3)] * 2


async def test_a_bucket_whose_burst_cannot_hold_a_tick_keeps_exact_time() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=20, burst=1, clock=clock, tick=0.1)
    await bucket.acquire()
    done: list[int] = []
    one = _acquirer(bucket, done, lambda: 1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(one)
        await _settle()
        clock.advance(0.0501)
        await _settle()
        assert done == [1]


async def test_a_ticking_bucket_never_exceeds_its_rate() -> None:
    clock = FakeClock(monotonic=1000.037)  # off the grid
    qps, burst, n = 20.0, 3, 40
    bucket = TokenBucket(qps=qps, burst=burst, clock=clock, tick=0.1)
    grants: list[float] = []
    one = _acquirer(bucket, grants, clock.monotonic)

    t0 = clock.monotonic()
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(one)
        await _settle()
        while len(grants) < n:
            clock.advance(0.01)
            await _settle()
    for j in range(n):
        assert j + 1 <= burst + qps * (grants[j] - t0) + 1e-6
    # waking on the tick only: every grant after the burst comes at the first step of
    # the fake clock at or past a multiple of 0.1 s
    assert all((g + 1e-6) % 0.1 < 0.01 for g in grants[burst:])
    # and the tick costs at most one tick at the end
    assert grants[-1] - t0 <= (n - burst) / qps + 0.1 + 1e-6


def test_on_tick_ends_a_wait_on_the_grid() -> None:
    clock = FakeClock(monotonic=1000.03)
    assert on_tick(0.02, 0.1, clock) == pytest.approx(0.07)
    assert on_tick(0.07, 0.1, clock) == pytest.approx(0.07), "already on the grid: kept"
    assert on_tick(0.0, 0.1, clock) == pytest.approx(0.07)
    assert on_tick(0.02, 0.0, clock) == 0.02, "no tick: exactly"
    assert on_tick(-1.0, 0.0, clock) == 0.0
