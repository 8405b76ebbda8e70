"""The intake of training-progress reports, and what is kept of them until the job's
status shows them.

Reports arrive at ``/v1/namespaces/{ns}/tfjobs/{name}/progress`` (the server,
controller.serving.reports, has checked the token for ``audience(ns, name)`` by then).
Each is taken only from a pod of that job, as the job and the pod stand in the
informer caches (reconcile.progress.identity), and kept as that replica's record,
replacing its last one. The job is then scheduled for a pass no sooner than its
training-progress pace allows (``pacer``), nor before the slot it holds for all jobs'
such writes together (``gate``): the pass summarises the records into
``trainingProgress`` (reconcile.plan.training) and writes it, paced unless the pass
writes anything else anyway. Many reports of one job between two writes cost one pass.

Memory: one record per (replica type, index) of each job that reported; a job's go
when it is gone (``forget``), a replica's when a later pod of its index reports.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

from controller.types import (
    JSON,
    POD_IP_INDEX,
    POD_NAME_EXTRA,
    POD_UID_EXTRA,
    CacheReader,
    Caller,
    KeyQueue,
    Pacer,
    Reply,
    SlotGate,
    object_key,
)
from reconcile.progress.identity import Refusal, audience, reporter_of
from reconcile.progress.records import ReplicaRecord, known_step, record
from reconcile.progress.wire import ReportError, parse_report

#: namespace and name as the apiserver allows them (DNS labels and subdomains)
_PATH = re.compile(
    r"/v1/namespaces/([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)"
    r"/tfjobs/([a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?)/progress"
)
_SA_PREFIX = "system:serviceaccount:"
#: reports of one job arriving together (its replicas report on the same epoch) share
#: the pass that shows them
GATHER_SECONDS = 0.2
#: a token issued this long ago names a pod our cache would hold by now: one it does not
#: hold is gone, not ahead of the cache (a token is issued after its pod is bound)
UNCACHED_GRACE_SECONDS = 5.0
#: how much of the server's reason for a deaf window a job's condition repeats
MAX_WHY = 200


class ProgressIntake:
    """Implements controller.types.ReportSink for TFJobs."""

    def __init__(
        self,
        *,
        jobs: CacheReader,
        pods: CacheReader,
        queue: KeyQueue,
        pacer: Pacer,
        now: Callable[[], datetime],
        gate: SlotGate | None = None,
    ) -> None:
        self._jobs = jobs
        self._pods = pods
        self._queue = queue
        self._pacer = pacer
        self._gate = gate
        self._now = now
        self._records: dict[str, dict[tuple[str, int], ReplicaRecord]] = {}
        #: the server's last word that reporters may have gone unheard (``unheard``)
        self.unheard_at: tuple[datetime, str] | None = None

    def audience(self, path: str) -> str | None:
        m = _PATH.fullmatch(path)
        return audience(m.group(1), m.group(3)) if m else None

    def _job(self, path: str) -> tuple[str, str, JSON] | Reply:
        """The path's namespace, name and cached job, or the 404 saying there is none."""
        m = _PATH.fullmatch(path)
        if m is None:
            return Reply(404, "no such path")
        ns, name = m.group(1), m.group(3)
        job = self._jobs.get(ns, name)
        return (ns, name, job) if job is not None else Reply(404, f"no TFJob {ns}/{name}")

    def precheck(
        self, path: str, pod_name: str, pod_uid: str, issued_at: float | None
    ) -> Reply | None:
        found = self._job(path)
        if isinstance(found, Reply):
            return found
        ns, _, job = found
        pod = self._pods.get(ns, pod_name)
        fresh = issued_at is None or issued_at + UNCACHED_GRACE_SECONDS > self._now().timestamp()
        if pod is None and fresh:
            # a pod we just made may be ahead of our cache: the client comes back
            return Reply(503, "the pod is not known yet", retry_after=1.0)
        who = reporter_of(
            job, pod, pod_name=pod_name, pod_uid=pod_uid, service_account_namespace=ns
        )
        return Reply(who.status, who.message) if isinstance(who, Refusal) else None

    def accept(self, path: str, caller: Caller, body: bytes) -> Reply:
        found = self._job(path)
        if isinstance(found, Reply):
            return found
        ns, name, job = found
        pod_name = caller.first(POD_NAME_EXTRA)
        who = reporter_of(
            job,
            self._pods.get(ns, pod_name) if pod_name else None,
            pod_name=pod_name,
            pod_uid=caller.first(POD_UID_EXTRA),
            service_account_namespace=_sa_namespace(caller.username),
        )
        if isinstance(who, Refusal):
            return Reply(who.status, who.message)
        try:
            report = parse_report(body)
        except ReportError as e:
            return Reply(400, str(e), field_name=e.field)
        key = object_key(ns, name)
        held = self._records.setdefault(key, {})
        slot = (who.replica_type, who.index)
        prev = held.get(slot)
        baseline = None
        if prev is None:  # after a failover: the step the stored status shows
            status = job.get("status")
            stored = status.get("trainingProgress") if isinstance(status, dict) else None
            baseline = known_step(stored, who.replica_type, who.index)
        held[slot] = record(prev, who, report, self._now(), baseline)
        # not before the job's pace allows, nor before the slot it waits for (a pass
        # before then would only find that out again)
        waits = self._gate.held(key) if self._gate is not None else 0.0
        self._queue.add_after(key, max(GATHER_SECONDS, self._pacer.delay(key), waits))
        return Reply(204)

    def unheard(self, at: datetime, why: str) -> None:
        self.unheard_at = (at, why[:MAX_WHY])

    def known_source(self, address: str) -> bool:
        """An address one of our jobs' pods has (or a host-network one's node)."""
        return bool(address) and bool(self._pods.by_index(POD_IP_INDEX, address))

    def records(self, key: str) -> tuple[ReplicaRecord, ...]:
        """The job's replicas' last records (shared values: never changed in place)."""
        held = self._records.get(key)
        return tuple(held.values()) if held else ()

    def forget(self, key: str) -> None:
        self._records.pop(key, None)

    def __len__(self) -> int:
        return sum(len(v) for v in self._records.values())


def _sa_namespace(username: str) -> str:
    """The namespace of a service account's username ("system:serviceaccount:ns:sa")."""
    if not username.startswith(_SA_PREFIX):
        return ""
    return username[len(_SA_PREFIX) :].split(":", 1)[0]
