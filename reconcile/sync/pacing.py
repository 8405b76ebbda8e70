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
The pace is the controller's ``--status-pace`` (this default, kept under the client's
0.1 s tick: throttled creates go out two at a time on it, so a job's pods start in pairs
0.1 s apart, and each pair gets its own write). Each progress write costs the write, its
echo through the job informer and a pass: a longer pace buys CPU with staler counts, never
with a later outcome. The measured trade-off is in docs/benchmarks.md.
"""

from __future__ import annotations

PROGRESS_BATCH_SECONDS = 0.05
STATUS_PACE_SECONDS = 0.09
#: A pace beyond this would leave counts stale longer than a user waits for them.
MAX_STATUS_PACE = 10.0
