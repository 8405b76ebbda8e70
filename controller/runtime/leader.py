"""Leader election on a coordination.k8s.io/v1 Lease.

Contract (client-go leaderelection, with its safety model: this is NOT fencing):
- Timing: lease 15s, renew deadline 10s, retry period 2s. A candidate retries every
  retry period plus up to 20% jitter (client-go allows up to +120%; a smaller jitter
  lets a follower pick up a released lease within ~2.4s).
- Every decision uses the local monotonic clock: another holder's lease counts as
  expired only when its record has not CHANGED for ``lease_duration`` since we last saw
  it change. Timestamps in the Lease are written for humans and never trusted, so
  wall-clock skew or jumps cannot cause two leaders.
- Every write carries the resourceVersion read just before, so two candidates racing
  for an expired lease cannot both win (one gets Conflict). A lease with an empty
  holder (released) is free at once.
- ``hold()`` starts a renewal every retry period, counted from the start of the one
  before (client-go's PollImmediateUntil within a renew-deadline window), and returns
  when none succeeded for ``renew_deadline`` (or it saw another holder): the caller
  must stop all work at once and exit non-zero; lease_duration - renew_deadline (5s)
  is the margin for that. An attempt may take up to renew_deadline / 2 (a 2.5 s round
  trip each for the GET and the PUT) and the leader still keeps up.
- Fencing by time: a renewal counts from the moment its attempt *started* (before the
  GET), never from its response, and the whole attempt (GET and PUT together) is
  bounded by what is left of the renew deadline, measured on our clock. Others count
  our lease from when they see it change, which is after our PUT landed, so hold()
  returns no later than renew_deadline after the start of the last renewal that
  others could have seen, strictly before lease_duration after it. The 5 s between the
  two cover stopping the work and a difference in clock rates between the replicas
  (NTP-disciplined clocks differ by far less than 1%, 0.15 s over a lease).
- ``release()`` (graceful shutdown, after work has drained) writes an empty holder
  with leaseDurationSeconds=1 so a follower does not wait out the full lease.
- Each API call is bounded by a timeout shorter than the renew deadline, so a hung
  request cannot silently overrun it.
- The Lease is read and written through a controller.types.LeaseClient, e.g.
  ``ResourceClient(api, LEASES)``. ``on_change(leading)`` is called on every change of
  ``leading`` (the composition root points it at leader_election_master_status).
"""

from __future__ import annotations

import random
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import structlog

from controller import errors
from controller.clock import SystemClock
from controller.types import JSON, Clock, LeaseClient

log = structlog.get_logger("controller.runtime.leader")

T = TypeVar("T")


def default_identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class LeaseElector:
    def __init__(
        self,
        leases: LeaseClient,
        *,
        namespace: str,
        name: str,
        identity: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        jitter: float = 0.2,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        if not lease_duration > renew_deadline > retry_period * (1 + jitter):
            raise ValueError("need lease_duration > renew_deadline > retry_period*(1+jitter)")
        self._leases = leases
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._jitter = jitter
        self._clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self._on_change = on_change
        self._observed: JSON | None = None  # last seen spec
        self._observed_at = 0.0  # monotonic time it last changed
        self._last_renew = 0.0  # start of the last successful attempt
        self._leading = False
        self._log = log.bind(lease=f"{namespace}/{name}", identity=self.identity)

    @property
    def leading(self) -> bool:
        return self._leading

    def healthy(self) -> bool:
        """Healthz check: false once we lead but failed to renew past the lease."""
        if not self._leading:
            return True
        return self._clock.monotonic() - self._last_renew < self.lease_duration

    def _set_leading(self, leading: bool) -> None:
        if leading != self._leading:
            self._leading = leading
            if self._on_change is not None:
                self._on_change(leading)

    def _micro_time(self) -> str:
        return self._clock.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    async def _bounded(self, seconds: float, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, given up after ``seconds`` on our clock (ConnectionFailed)."""
        outcome: list[T] = []
        failure: list[BaseException] = []
        async with anyio.create_task_group() as tg:

            async def attempt() -> None:
                try:
                    outcome.append(await call())
                except Exception as exc:
                    failure.append(exc)
                tg.cancel_scope.cancel()

            tg.start_soon(attempt)
            await self._clock.sleep(max(seconds, 0.0))
            tg.cancel_scope.cancel()
        if failure:
            raise failure[0]
        if not outcome:
            raise errors.ConnectionFailed(f"lease attempt timed out after {seconds:.1f}s")
        return outcome[0]

    async def try_acquire_or_renew(self, budget: float | None = None) -> bool:
        """One attempt (the GET and the write together) bounded by ``budget`` seconds.
        True when we hold the lease afterwards."""
        budget = self.renew_deadline if budget is None else budget
        return await self._bounded(budget, self._attempt)

    async def _attempt(self) -> bool:
        now = self._micro_time()
        ns, name = self.namespace, self.name
        lease = await self._leases.get(ns, name)
        if lease is None:
            first: dict[str, Any] = {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_duration),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            }
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": ns},
                "spec": first,
            }
            try:
                await self._leases.create(ns, body)
            except errors.Conflict:  # AlreadyExists: someone else created it first
                return False
            self._observe(first)
            return True

        spec = self._note(lease)
        holder = spec.get("holderIdentity") or ""
        mine = holder == self.identity
        if holder and not mine:
            if self._clock.monotonic() < self._observed_at + self.lease_duration:
                return False
        new_spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": spec.get("acquireTime") if mine else now,
            "renewTime": now,
            "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if mine else 1),
        }
        body = {**lease, "spec": new_spec}
        try:
            await self._leases.replace(ns, name, body)
        except errors.Conflict:
            return False
        self._observe(new_spec)
        return True

    async def observe(self) -> None:
        """Read the lease every retry period without competing for it, until cancelled.

        Run while the caches sync: a holder that died before we started has then been
        seen unchanged since our first read, and ``acquire()`` takes its lease as soon as
        that is ``lease_duration`` ago, not ``lease_duration`` after the sync. At 5,000
        jobs the sync takes 15-20 s, and a replacement for a killed leader sat out a
        second full lease after it (start to lease 36.5 s; the lease itself is 15 s)."""
        ns, name = self.namespace, self.name
        while True:
            try:
                lease = await self._bounded(self.renew_deadline, lambda: self._leases.get(ns, name))
            except errors.ApiError as exc:
                self._log.debug("lease read failed", error=str(exc))
            else:
                if lease is not None:
                    self._note(lease)
            await self._clock.sleep(self._retry_delay())

    def _note(self, lease: JSON) -> dict[str, Any]:
        """The lease's spec, observed anew if it changed since we last saw it."""
        spec: dict[str, Any] = dict(lease.get("spec") or {})
        if spec != self._observed:
            self._observe(spec)
        return spec

    def _observe(self, spec: JSON) -> None:
        self._observed = spec
        self._observed_at = self._clock.monotonic()

    def _retry_delay(self) -> float:
        return self.retry_period * (1 + self._rng.random() * self._jitter)

    async def acquire(self) -> None:
        """Block until we hold the lease."""
        self._log.info("waiting for leadership")
        while True:
            started = self._clock.monotonic()
            try:
                if await self.try_acquire_or_renew():
                    break
            except errors.ApiError as exc:
                self._log.warning("lease acquire failed", error=str(exc))
            await self._clock.sleep(self._retry_delay())
        self._last_renew = started
        self._set_leading(True)
        self._log.info("leader acquired")

    async def hold(self) -> None:
        """Renew until it fails for renew_deadline (or another holder shows up), then
        return. The caller must stop all guarded work immediately.

        As client-go's renew loop: attempts start every retry period, back to back when
        one takes longer, and leadership is lost only when none succeeded within the
        renew deadline; a success opens a new window. Both the cadence and the window
        count from the START of an attempt (client-go opens the window later, when the
        next round begins; ours is the fence). Were the next attempt timed from the end
        of the last, as it once was, a 4 s attempt (2 s GET, 2 s PUT) would leave the
        next 10 - 4 - 2 = 4 s, too little, and the leader gave up with the apiserver up.
        Timed from the start, attempts of up to half the renew deadline keep up."""
        next_attempt = self._last_renew + self.retry_period
        while True:
            deadline = self._last_renew + self.renew_deadline
            wait = min(next_attempt, deadline) - self._clock.monotonic()
            if wait > 0:
                await self._clock.sleep(wait)
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                self._set_leading(False)
                self._log.error("leader lost: renew deadline exceeded")
                return
            started = self._clock.monotonic()
            next_attempt = started + self.retry_period
            try:
                renewed = await self.try_acquire_or_renew(remaining)
            except errors.ApiError as exc:
                self._log.warning("lease renew failed", error=str(exc))
                renewed = False
            if renewed:
                self._last_renew = started
                continue
            holder = (self._observed or {}).get("holderIdentity")
            if holder and holder != self.identity:
                self._set_leading(False)
                self._log.error("leader lost: lease taken", holder=holder)
                return

    async def release(self) -> None:
        """Give the lease up, if we hold it. Call only after guarded work has stopped."""
        if not self._leading:
            return
        self._set_leading(False)
        ns, name = self.namespace, self.name
        try:
            lease = await self._bounded(self.renew_deadline, lambda: self._leases.get(ns, name))
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            now = self._micro_time()
            spec = {
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": (lease.get("spec") or {}).get("leaseTransitions", 0),
            }
            body = {**lease, "spec": spec}
            await self._bounded(self.renew_deadline, lambda: self._leases.replace(ns, name, body))
            self._log.info("leader released")
        except errors.ApiError as exc:
            self._log.warning("lease release failed", error=str(exc))
