"""The upstream operator's job metrics, counted once per transition.

Names and labels match the Kubeflow Training Operator's (training_operator_jobs_*
with job_namespace and framework), so existing dashboards keep working; unlike
upstream, a restart of the controller or a re-asserted condition counts nothing twice,
and every counter of a namespace exists (at 0) from its first job on: a series that
appears at 1 hides its first increase from ``increase()``, and so from an alert.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.observability.prometheus import Counter, Registry
from reconcile.policy import conditions as cond

FRAMEWORK = "tensorflow"


class JobMetrics:
    def __init__(self, registry: Registry | None = None) -> None:
        labels = ["job_namespace", "framework"]
        kw = {"registry": registry if registry is not None else Registry()}
        self.created = Counter("training_operator_jobs_created", "TFJobs created", labels, **kw)
        self.deleted = Counter(
            "training_operator_jobs_deleted", "TFJobs deleted after their TTL", labels, **kw
        )
        self.successful = Counter(
            "training_operator_jobs_successful", "TFJobs that succeeded", labels, **kw
        )
        self.failed = Counter("training_operator_jobs_failed", "TFJobs that failed", labels, **kw)
        self.restarted = Counter(
            "training_operator_jobs_restarted", "TFJob replica restarts", labels, **kw
        )
        # ours (docs/stalls.md): a Stalled condition turning True, or a stall's restart
        self.stalled = Counter(
            "tfjob_stalls", "TFJobs whose progress deadline ran out", labels, **kw
        )
        self.stragglers = Counter(
            "tfjob_stragglers", "Replicas flagged as slower than their peers", labels, **kw
        )
        self._all = (
            self.created,
            self.deleted,
            self.successful,
            self.failed,
            self.restarted,
            self.stalled,
            self.stragglers,
        )
        #: namespaces whose series exist
        self._seen: set[str] = set()

    def _namespace(self, job: Mapping[str, Any]) -> str:
        ns = _ns(job)
        if ns not in self._seen:
            self._seen.add(ns)
            for counter in self._all:
                counter.labels(ns, FRAMEWORK)
        return ns

    def job_seen(self, job: Mapping[str, Any]) -> None:
        """A job seen for the first time: new only if no controller has written status."""
        ns = self._namespace(job)
        if not (job.get("status") or {}).get("conditions"):
            self.created.labels(ns, FRAMEWORK).inc()

    def transition(self, job: Mapping[str, Any], reason: str) -> None:
        counter = {
            cond.REASON_SUCCEEDED: self.successful,
            cond.REASON_FAILED: self.failed,
            cond.REASON_FAILED_VALIDATION: self.failed,
            cond.REASON_STALLED: self.failed,
            cond.REASON_NO_PROGRESS: self.failed,
            cond.REASON_RESTARTING: self.restarted,
            cond.REASON_DELETED_JOB: self.deleted,
            cond.REASON_PROGRESS_DEADLINE: self.stalled,
            cond.REASON_FIRST_PROGRESS_DEADLINE: self.stalled,
            cond.REASON_STRAGGLER: self.stragglers,
        }.get(reason)
        if counter is not None:
            counter.labels(self._namespace(job), FRAMEWORK).inc()


def _ns(job: Mapping[str, Any]) -> str:
    return str((job.get("metadata") or {}).get("namespace", ""))
