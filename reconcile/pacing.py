"""How soon a job is looked at again after an event, and how often it reports progress.

A pass that decides something must run, and write, at once; a pass that would only report
progress (replica counts, the Running condition) is worth holding back, because the pods
of one job are created and start together and each of their events would otherwise cost
a status write of its own. The holding is done with the workqueue's delays (``add_after``
keeps the earliest pending time, and a plain ``add`` is never held back) and the
machinery's pacer (controller.pacer); the reconciler keeps no per-job state for it.

- ``PROGRESS_BATCH_SECONDS``: a child appearing (our own create, observed) or a pod
  progressing (Pending to Running, readiness) enqueues its job this much later;
- ``STATUS_PACE_SECONDS``: after any status write, a job writes progress-only status
  no sooner than this; progress seen sooner waits (the pass's requeue_after), and our
  own status write, seen by the job informer, schedules a look no sooner either. A pace
  a little longer than a pod takes to start lets the last pods of a job share a write,
  or the decisive write (Succeeded) that usually follows them.
"""

from __future__ import annotations

PROGRESS_BATCH_SECONDS = 0.1
STATUS_PACE_SECONDS = 0.25
