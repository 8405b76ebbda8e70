"""The status write of a pass, paced when it reports progress alone, and the events it
announces once stored.

Progress alone (replica counts, Running) is paced: a job writes it at most once per
STATUS_PACE_SECONDS after any status write, and progress seen sooner waits, the wait
being the pass's requeue_after, so the pods of a job that start together share one
write (or the decisive write that follows them). Training progress alone
(trainingProgress, from the replicas' reports) has a pace of its own, seconds rather
than a tenth of one (``--progress-status-interval``). Anything else is written at once,
with the latest of both. A
pass that handed creates to the background hands its status write there too.
"""

from __future__ import annotations

import structlog

from controller.types import EventSink, Expectations, ObjectWriter, Spawner
from reconcile.api.spec import JobView
from reconcile.plan import Plan
from reconcile.sync.memory import JobMemory
from reconcile.sync.metrics import JobMetrics
from reconcile.sync.writes import WriteTally, write_status


class StatusWrites:
    def __init__(
        self,
        *,
        jobs: ObjectWriter,
        expectations: Expectations,
        events: EventSink,
        spawner: Spawner,
        memory: JobMemory,
        metrics: JobMetrics | None,
    ) -> None:
        self.jobs = jobs
        self.expectations = expectations
        self.events = events
        self.spawner = spawner
        self.memory = memory
        self.metrics = metrics

    async def write(self, key: str, view: JobView, plan: Plan, outcome: WriteTally) -> float | None:
        """Write the plan's status; return when to look at the job again.

        Progress alone (replica counts, Running) is paced: a job writes it at most once
        per STATUS_PACE_SECONDS after any status write, and progress seen sooner waits,
        the wait being this pass's requeue_after, so the pods of a job that start
        together share one write (or the decisive write that follows them). Anything
        else is written at once."""
        requeue_after = plan.requeue_after
        if plan.status is None:
            return requeue_after
        if outcome.deferred and not outcome.handed_off and not view.status.conditions:
            # A new job whose creates all wait for room in the background backlog: its
            # first status (Created) goes with its first creates, when the backlog puts
            # it back. Written now, a burst's thousands of these held every worker
            # (5,000 jobs: 70 ms a pass for 90 s) while the first jobs' pods ran
            # unreported: pod Running to status p99 11 s.
            structlog.contextvars.bind_contextvars(status_deferred=True)
            return requeue_after
        wait = 0.0
        if plan.training_only and self.memory.training_pacer is not None:
            wait = self.memory.training_pacer.delay(key)
            if wait <= 0 and self.memory.training_gate is not None:
                # every job's training progress together: a share of the status budget,
                # each job waiting for a slot of its own
                wait = self.memory.training_gate.reserve(key)
        elif plan.progress:
            wait = self.memory.pacer.delay(key)
        if wait > 0:
            structlog.contextvars.bind_contextvars(status_paced=round(wait, 3))
            return wait if requeue_after is None else min(requeue_after, wait)
        if outcome.handed_off:
            # This pass handed creates off, so the job's next pass waits for them anyway:
            # the status write joins them rather than hold a worker on the status
            # budget. In a burst of new jobs, their first writes (Created) queue there
            # for seconds, and workers waiting on them would leave other jobs' passes
            # (a pod now running, a chief that succeeded) waiting too.
            self._mark(key)
            self.memory.record(key).status_in_flight = True  # until the write is back
            self.spawner.spawn(
                key, lambda: self._write_and_announce(key, view, plan), bounded=False
            )
            outcome.status_handed_off = True
            return requeue_after
        # training progress alone queues on the status budget behind the writes that
        # report pods running or a job finished
        urgent = False if plan.training_only else None
        await write_status(self.jobs, self.expectations, key, view, plan.status, urgent=urgent)
        self._mark(key)
        outcome.status_written = True
        return requeue_after

    def _mark(self, key: str) -> None:
        """Any status write carries the latest progress of both kinds."""
        self.memory.pacer.mark(key)
        if self.memory.training_pacer is not None:
            self.memory.training_pacer.mark(key)

    async def _write_and_announce(self, key: str, view: JobView, plan: Plan) -> None:
        if plan.status is None:
            return
        try:
            await write_status(self.jobs, self.expectations, key, view, plan.status)
        finally:
            rec = self.memory.peek(key)
            if rec is not None:
                rec.status_in_flight = False
        self.announce(view, plan)

    def announce(self, view: JobView, plan: Plan) -> None:
        for ev in plan.events:
            self.events.event(view.raw, ev.type, ev.reason, ev.message)
            if self.metrics is not None:
                self.metrics.transition(view.raw, ev.reason)
