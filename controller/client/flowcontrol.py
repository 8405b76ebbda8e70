"""Client-side flow control: the token bucket every API budget draws from, with two
priorities so urgent writes go first (client-go's flowcontrol, with golang.org/x/time/rate's
bucket); and the point of no return of a write, for callers that may still take a write
back while it waits for its token (controller.runtime.background's ``drop``).
"""

from __future__ import annotations

import heapq
import itertools
from contextvars import ContextVar
from dataclasses import dataclass, field

import anyio

from controller.clock import SystemClock, on_tick
from controller.types import Clock


@dataclass(slots=True, eq=False)
class Commitment:
    """Whether a task's write has gone out: until it has, whoever runs the task may
    cancel it and nothing reaches the apiserver."""

    committed: bool = False


#: The current task's commitment, set by whoever may cancel its writes.
current_commitment: ContextVar[Commitment | None] = ContextVar("commitment", default=None)


def committed() -> None:
    """The calling task's write has its rate-limit token and goes out now: it can no
    longer be recalled. The API client calls this just before sending."""
    commitment = current_commitment.get()
    if commitment is not None:
        commitment.committed = True


#: ``TokenBucket.acquire`` priorities: lower goes first. TFJob status writes, which users
#: and the next reconcile wait on, are HIGH; everything else (creates, deletes, events,
#: reads) is NORMAL and keeps its arrival order.
PRIORITY_HIGH = 0
PRIORITY_NORMAL = 1


@dataclass(order=True, slots=True)
class _Waiter:
    priority: int
    seq: int
    event: anyio.Event = field(compare=False, default_factory=anyio.Event)
    #: "granted": it owns a token; "timer": it must sleep until the next token is due
    #: and hand tokens out; "": keep waiting.
    role: str = field(compare=False, default="")
    gone: bool = field(compare=False, default=False)
    #: the timer's sleep, cancelled when a waiter whose token is due sooner arrives (only
    #: a waiter that sleeps as the timer has one)
    scope: anyio.CancelScope | None = field(compare=False, default=None)


class TokenBucket:
    """A token bucket at ``qps`` with ``burst``, like golang.org/x/time/rate.

    ``reserve()`` always takes a token, possibly going into debt, and returns the delay
    after which the caller may proceed; callers that wait that long together never
    exceed ``qps`` on average or ``burst`` at once (the requeue limiters use it).

    ``acquire(priority)`` waits for a token in priority order: waiters are a heap of
    (priority, arrival), and each token that becomes due goes to the head, so a HIGH
    request that arrives behind a thousand waiting NORMAL ones takes the very next
    token. A request takes a token at once only when nobody of its priority or a higher
    one waits. One waiter at a time (the "timer") sleeps until the next token is due and
    hands out what has accrued; tokens are never created faster than ``qps`` nor held
    beyond ``burst``, so priorities reorder requests without changing the rate.
    ``qps <= 0`` disables limiting.

    ``tick``: the timer wakes only on multiples of it (``controller.clock.on_tick``) and
    hands out every token accrued by then, so at 20 qps and a 0.1 s tick two requests
    go out together every 0.1 s, and buckets on the same tick wake together. Tokens
    still accrue by elapsed time: the rate is unchanged, and a request waits at most
    one tick longer. A token available on arrival is taken at once, tick or not. A
    bucket whose burst is below ``qps * tick`` ignores the tick: the burst's cap would
    lose the tokens accrued while waiting for it.

    ``high_reserve``: that many tokens of the burst only a HIGH request may take. A
    NORMAL one goes when a token beyond the reserve is due, so under a steady NORMAL load
    the bucket holds the reserve, and a HIGH request finds a token waiting instead of
    waiting up to ``1/qps`` for the next. The rate is unchanged; NORMAL requests lose
    that much of the burst.
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Clock | None = None,
        *,
        tick: float = 0.0,
        high_reserve: int = 0,
    ) -> None:
        self._qps = qps
        self._burst = max(burst, 1)
        self._reserve = min(max(high_reserve, 0), self._burst - 1)
        # see the class doc; the tokens a NORMAL waiter may take are what must hold a tick
        self._tick = tick if qps * tick <= self._burst - self._reserve else 0.0
        self._clock = clock or SystemClock()
        self._tokens = float(self._burst)
        self._last = self._clock.monotonic()
        self._waiters: list[_Waiter] = []
        self._seq = itertools.count()
        self._timer: _Waiter | None = None

    @property
    def enabled(self) -> bool:
        return self._qps > 0

    @property
    def waiting(self) -> int:
        """Requests waiting in ``acquire`` (for tests and metrics)."""
        return sum(1 for w in self._waiters if not w.gone)

    def _refill(self) -> None:
        now = self._clock.monotonic()
        self._tokens = min(float(self._burst), self._tokens + (now - self._last) * self._qps)
        self._last = now

    def reserve(self) -> float:
        if self._qps <= 0:
            return 0.0
        self._refill()
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self._qps

    def _need(self, priority: int) -> float:
        """Tokens that must be in the bucket for a request of ``priority`` to take one."""
        return 1.0 if priority <= PRIORITY_HIGH else 1.0 + self._reserve

    def _head(self) -> _Waiter | None:
        while self._waiters and self._waiters[0].gone:
            heapq.heappop(self._waiters)
        return self._waiters[0] if self._waiters else None

    async def acquire(self, priority: int = PRIORITY_NORMAL) -> None:
        if self._qps <= 0:
            return
        head = self._head()
        if head is None or head.priority > priority:  # nobody waits ahead of this one
            self._refill()
            if self._tokens >= self._need(priority):
                self._tokens -= 1.0
                return
        me = _Waiter(priority, next(self._seq))
        heapq.heappush(self._waiters, me)
        if self._timer is None:
            self._make_timer(me)
        elif head is not None and self._need(priority) < self._need(head.priority):
            # The timer sleeps until a token is due for the old head; this one's is due
            # sooner: wake it to sleep again for the right time.
            if self._timer.scope is not None:
                self._timer.scope.cancel()
        try:
            while me.role != "granted":
                if me.role == "timer":
                    with anyio.CancelScope() as me.scope:
                        await self._clock.sleep(self._until_due())
                    self._timer = None
                    me.role = ""
                    self._grant()
                    # the duty stays with this waiter, or passes on once it has a token
                    self._make_timer(None if me.role == "granted" else me)
                else:
                    await me.event.wait()
                    me.event = anyio.Event()
        except BaseException:
            # Cancelled: leave the queue; a timer hands its duty on. A token already
            # granted is not returned (erring on the slow side keeps the rate bound).
            me.gone = True
            if self._timer is me:
                self._timer = None
                self._make_timer(None)
            raise

    def _until_due(self) -> float:
        """How long the timer sleeps: until the next token is due, on the tick."""
        head = self._head()
        need = self._need(head.priority if head is not None else PRIORITY_HIGH)
        due = self._last + (need - self._tokens) / self._qps - self._clock.monotonic()
        return on_tick(due, self._tick, self._clock)

    def _grant(self) -> None:
        """Hand every token that is due to the waiters at the head of the heap."""
        self._refill()
        while (w := self._head()) is not None and self._tokens >= self._need(w.priority) - 1e-9:
            heapq.heappop(self._waiters)
            self._tokens -= 1.0
            w.role = "granted"
            w.event.set()

    def _make_timer(self, candidate: _Waiter | None) -> None:
        """Give the timer duty to ``candidate`` (a waiter that is running), else to the
        first live waiter, which is woken to take it up."""
        head = self._head()
        if candidate is not None and not candidate.gone and candidate.role == "":
            self._timer = candidate
            candidate.role = "timer"
            return
        if head is not None:
            self._timer = head
            head.role = "timer"
            head.event.set()
