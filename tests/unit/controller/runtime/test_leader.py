from __future__ import annotations

import copy
import itertools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import pytest

from controller import errors
from controller.clock import FakeClock
from controller.observability.metrics import Metrics
from controller.runtime.leader import LeaseElector
from controller.types import JSON


class FakeLeases:
    """One namespace's Leases with apiserver-like RV checks and injectable failures."""

    def __init__(self) -> None:
        self.objects: dict[str, JSON] = {}
        self.rv = 0
        self.fail: BaseException | None = None

    def _check(self) -> None:
        if self.fail is not None:
            raise self.fail

    async def get(self, namespace: str | None, name: str) -> JSON | None:
        self._check()
        obj = self.objects.get(name)
        return copy.deepcopy(obj) if obj else None

    async def create(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        self._check()
        name = body["metadata"]["name"]
        if name in self.objects:
            raise errors.AlreadyExists(409, "AlreadyExists", name)
        return self._store(name, dict(body))

    async def replace(self, namespace: str, name: str, body: Mapping[str, Any]) -> JSON:
        self._check()
        current = self.objects[name]
        if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise errors.Conflict(409, "Conflict", "stale")
        return self._store(name, dict(body))

    def _store(self, name: str, body: JSON) -> JSON:
        self.rv += 1
        obj = copy.deepcopy(body)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[name] = obj
        return copy.deepcopy(obj)

    def holder(self, name: str = "lock") -> str | None:
        obj = self.objects.get(name)
        return obj["spec"].get("holderIdentity") if obj else None


def elector(leases: FakeLeases, clock: FakeClock, identity: str, **kw: Any) -> LeaseElector:
    return LeaseElector(leases, namespace="ns", name="lock", identity=identity, clock=clock, **kw)


async def test_first_candidate_creates_and_second_waits_full_lease() -> None:
    clock, leases = FakeClock(), FakeLeases()
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    assert await a.try_acquire_or_renew()
    assert leases.holder() == "a"
    assert not await b.try_acquire_or_renew()
    clock.advance(14.9)
    assert not await b.try_acquire_or_renew(), "b must wait a full lease from its observation"
    clock.advance(0.2)
    assert await b.try_acquire_or_renew()
    spec = leases.objects["lock"]["spec"]
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1


async def test_renewals_keep_followers_out() -> None:
    clock, leases = FakeClock(), FakeLeases()
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    assert await a.try_acquire_or_renew()
    for _ in range(20):
        clock.advance(2.0)
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()
    assert leases.objects["lock"]["spec"]["leaseTransitions"] == 0


async def test_release_lets_follower_in_at_once() -> None:
    clock, leases = FakeClock(), FakeLeases()
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    await a.acquire()
    assert not await b.try_acquire_or_renew()
    await a.release()
    assert leases.holder() == ""
    assert leases.objects["lock"]["spec"]["leaseDurationSeconds"] == 1
    assert await b.try_acquire_or_renew()


async def test_release_does_not_touch_someone_elses_lease() -> None:
    clock, leases = FakeClock(), FakeLeases()
    a = elector(leases, clock, "a")
    await a.acquire()
    leases.objects["lock"]["spec"]["holderIdentity"] = "intruder"
    await a.release()
    assert leases.holder() == "intruder"


async def hold_until_lost(
    a: LeaseElector, clock: FakeClock, before: Callable[[], Awaitable[None]], step: float
) -> float:
    """Run ``a.hold()``; once ``before()`` has set the scene, advance the clock by
    ``step`` until hold returns. When it returned, on the fake clock."""
    lost_at: list[float] = []
    async with anyio.create_task_group() as tg:

        async def hold() -> None:
            await a.hold()
            lost_at.append(clock.monotonic())

        tg.start_soon(hold)
        await anyio.wait_all_tasks_blocked()
        await before()
        with anyio.fail_after(5):
            while not lost_at:
                clock.advance(step)
                await anyio.wait_all_tasks_blocked()
    assert not a.leading
    return lost_at[0]


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(errors.ServerError(503, "", "down"), id="apiserver-errors"),
        pytest.param(errors.ConnectionFailed("refused"), id="connection-refused"),
    ],
)
async def test_hold_returns_after_renew_deadline_of_failures(failure: errors.ApiError) -> None:
    clock, leases = FakeClock(), FakeLeases()
    a = elector(leases, clock, "a")
    await a.acquire()
    last_ok = 0.0

    async def one_renewal_then_failures() -> None:
        nonlocal last_ok
        clock.advance(2.0)  # one good renewal
        await anyio.wait_all_tasks_blocked()
        leases.fail = failure
        last_ok = clock.monotonic()

    lost = await hold_until_lost(a, clock, one_renewal_then_failures, 0.5)
    assert last_ok + 10.0 <= lost <= last_ok + 10.0 + 2.5, (last_ok, lost)
    assert lost < last_ok + 15.0, "must give up before the lease can expire for others"


async def test_hold_returns_when_lease_taken() -> None:
    clock, leases = FakeClock(), FakeLeases()
    a = elector(leases, clock, "a")
    await a.acquire()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(a.hold)
            await anyio.wait_all_tasks_blocked()
            leases.objects["lock"]["spec"]["holderIdentity"] = "other"
            clock.advance(2.0)
    assert not a.leading


async def test_acquire_retries_through_errors() -> None:
    clock, leases = FakeClock(), FakeLeases()
    a = elector(leases, clock, "a")
    leases.fail = errors.ServerError(500, "", "boom")
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.acquire)
        await anyio.wait_all_tasks_blocked()
        assert not a.leading
        delay = clock.next_deadline() - clock.monotonic()  # type: ignore[operator]
        assert 2.0 <= delay <= 2.4
        leases.fail = None
        clock.advance(delay)
    assert a.leading and leases.holder() == "a"


async def test_a_lease_followed_while_the_caches_sync_counts_from_the_first_read() -> None:
    """A holder that died before we started: its lease runs out while we only follow it
    (the caches syncing), and the first attempt afterwards takes it, where a candidate
    that reads it only then must wait a full lease more."""
    clock, leases = FakeClock(), FakeLeases()
    assert await elector(leases, clock, "dead").try_acquire_or_renew()
    written = leases.rv
    follower, late = elector(leases, clock, "follower"), elector(leases, clock, "late")
    async with anyio.create_task_group() as tg:
        tg.start_soon(follower.observe)
        began = clock.monotonic()
        while clock.monotonic() < began + 16:  # 16 s of syncing: reads, never a write
            await anyio.wait_all_tasks_blocked()
            clock.advance(0.5)
        tg.cancel_scope.cancel()
    assert leases.rv == written and leases.holder() == "dead"
    assert not await late.try_acquire_or_renew(), "late first saw the lease just now"
    assert await follower.try_acquire_or_renew()
    assert leases.holder() == "follower"


def test_invalid_timing_rejected() -> None:
    with pytest.raises(ValueError):
        LeaseElector(FakeLeases(), namespace="n", name="l", lease_duration=10, renew_deadline=10)


async def test_leader_gauge_follows_acquire_lose_and_release() -> None:
    """leader_election_master_status, wired as the composition root wires it."""
    clock, leases, metrics = FakeClock(), FakeLeases(), Metrics()

    def gauge() -> float | None:
        return metrics.registry.sample("leader_election_master_status", {"name": "lock"})

    a = elector(leases, clock, "a", on_change=metrics.leader_status("lock"))
    assert gauge() == 0, "exported as 0 before the first election"
    await a.acquire()
    assert gauge() == 1
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(a.hold)
            await anyio.wait_all_tasks_blocked()
            clock.advance(2.0)  # a renewal keeps it at 1
            await anyio.wait_all_tasks_blocked()
            assert gauge() == 1
            leases.objects["lock"]["spec"]["holderIdentity"] = "other"
            clock.advance(2.0)
    assert not a.leading and gauge() == 0, "lost"
    leases.objects["lock"]["spec"]["holderIdentity"] = ""  # released by the other
    await a.acquire()
    assert gauge() == 1
    await a.release()
    assert gauge() == 0, "released"


class SlowLeases(FakeLeases):
    """GETs take ``get_seconds`` and PUTs ``put_seconds`` on the fake clock; PUTs hang
    while ``hang`` is set. ``stored`` holds when each PUT was stored."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.get_seconds = 0.0
        self.put_seconds = 0.0
        self.hang = False
        self.stored: list[float] = []

    async def get(self, namespace: str | None, name: str) -> JSON | None:
        await self.clock.sleep(self.get_seconds)
        return await super().get(namespace, name)

    async def replace(self, namespace: str, name: str, body: Mapping[str, Any]) -> JSON:
        if self.hang:
            await anyio.Event().wait()
        await self.clock.sleep(self.put_seconds)
        out = await super().replace(namespace, name, body)
        self.stored.append(self.clock.monotonic())
        return out


async def test_a_slow_get_and_a_hung_put_never_outlast_the_lease() -> None:
    """The renew deadline bounds the whole attempt and counts from before its request:
    with a 6 s GET and a PUT that never answers, the leader stops 10 s after the start
    of its last renewal, 5 s before any follower may take over (it used to go on for
    19.5 s: each call got the full remaining budget, and renewals were timed from their
    response)."""
    clock = FakeClock()
    leases = SlowLeases(clock)
    a = elector(leases, clock, "a")
    await a.acquire()
    renewal_started = clock.monotonic() + 2.0

    async def slow_renewal_then_hung_put() -> None:
        # one renewal whose GET is slow: it counts from when it started, not ended
        leases.get_seconds = 1.5
        clock.advance(2.0)
        await anyio.wait_all_tasks_blocked()
        clock.advance(1.5)
        await anyio.wait_all_tasks_blocked()
        leases.get_seconds, leases.hang = 6.0, True

    lost = await hold_until_lost(a, clock, slow_renewal_then_hung_put, 0.25)
    assert lost <= renewal_started + 10.0 + 0.25, (renewal_started, lost)
    assert lost < renewal_started + 15.0 - 4.5


async def test_a_minute_of_slow_round_trips_keeps_the_lease() -> None:
    """Every GET and PUT takes 2.25 s (a 2 s round trip and the apiserver's own time):
    a renewal takes 4.5 s. Renewals start every retry period counted from the start of
    the one before, back to back here, each with 5.5 s of its window left, so the
    leader keeps the lease for the whole minute. (It used to wait a retry period after
    each renewal ENDED: the next had 3.5 s of its window left, timed out, and the
    leader gave up 10 s after the first slow renewal began.) Then the PUTs hang and the
    fence still holds: hold returns 10 s after the start of the last renewal."""
    clock = FakeClock()
    leases = SlowLeases(clock)
    a = elector(leases, clock, "a")
    await a.acquire()
    leases.get_seconds = leases.put_seconds = 2.25
    slow_from = clock.monotonic()
    returned: list[float] = []
    async with anyio.create_task_group() as tg:

        async def hold() -> None:
            await a.hold()
            returned.append(clock.monotonic())

        tg.start_soon(hold)
        await anyio.wait_all_tasks_blocked()
        with anyio.fail_after(5):
            while clock.monotonic() < slow_from + 60.0:
                clock.advance(0.25)
                await anyio.wait_all_tasks_blocked()
                assert not returned, f"lost the lease {returned[0] - slow_from:.2f} s in"
        assert a.leading and a.healthy()
        renewals = [t - slow_from for t in leases.stored if t > slow_from]
        gaps = [y - x for x, y in itertools.pairwise([0.0, *renewals])]
        assert len(renewals) >= 60 // 4.5 - 1, renewals
        assert max(gaps) <= 4.5 + 2.0 + 0.25, gaps

        # the fence: counted from the start of the last renewal that was stored (the
        # one in flight now may still be)
        leases.hang = True
        with anyio.fail_after(5):
            while not returned:
                clock.advance(0.25)
                await anyio.wait_all_tasks_blocked()
    assert not a.leading
    last_start = leases.stored[-1] - 4.5
    assert last_start + 10.0 <= returned[0] <= last_start + 10.0 + 0.25, returned[0] - last_start
