"""How soon a job is looked at again after an event, and how often it reports progress.

A pass that decides something must run, and write, at once; a pass that would only report
progress (replica counts, the Running condition) is worth holding back, because the pods
of one job are created and start together and each of their events would otherwise cost
a status write of its own. The holding is done with the workqueue's delays (``add_after``
keeps the earliest pending time, and a plain ``add`` is never held back) and the
machinery's pacer (controller.runtime.pacer); the reconciler keeps no per-job state for it.

- ``PROGRESS_BATCH_SECONDS``: a child appearing (our own create, observed) or a pod
  progressing (Pending to Running, readiness) enqueues its job this much later;
- ``STATUS_PACE_SECONDS``: after any status write, a job writes progress-only status
  no sooner than this; progress seen sooner waits (the pass's requeue_after), and our
  own status write, seen by the job informer, schedules a look no sooner either.

The two together bound how stale progress can be: batch + pace + one write's round trip.
At 50 + 120 ms, `hack/bench --jobs 100 --qps 20/30` gives pod Running -> status p99
169 ms for 5.84 status writes per job; at 100 + 250 ms it was 279-300 ms for 3.97, at
50 + 150 ms 205 ms for 4.94.

The pace stays under the client's tick (``--kube-api-tick``, 0.1 s): throttled creates
go out two at a time on it, so a job's pods start in pairs 0.1 s apart. A pace longer
than that cadence makes each write wait a little longer than the last; under it each
pair gets its own write. Full `hack/bench --compare upstream` runs at 20/30: p50 83 ms
for 5.00 writes per job at 120 ms, 57 ms for 5.90 at 90 ms. The p99 (216 and 270 ms)
was set by something else: waits for the status budget while it drained a burst's
Created writes (now a reserve keeps tokens for urgent writes, tfjob_controller.app's
Budgets) and, unlimited, for a connection behind the creates.
"""

from __future__ import annotations

PROGRESS_BATCH_SECONDS = 0.05
STATUS_PACE_SECONDS = 0.09
