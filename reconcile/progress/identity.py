"""Whose report it is: the audience a job's tokens are issued for, and the pod a token
was bound to, checked against the job.

A report is authenticated by a projected service-account token reviewed by the
apiserver with the job's audience. That proves the sender holds a token the kubelet
issued for some pod, for this audience; it does not prove the pod is one of this job's
(any pod of the namespace may ask for a token of any audience). So the bound pod, named
in the review's user extra (pod name and UID), must be a pod of the cache whose
controller is this job, and the replica type and index are read from that pod's labels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconcile.api.labels import replica_index_of, replica_type_of
from reconcile.objects.reporting import audience
from reconcile.progress.records import Reporter

__all__ = ["Refusal", "audience", "reporter_of"]


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int  # 403 or 404
    message: str


def reporter_of(
    job: Mapping[str, Any],
    pod: Mapping[str, Any] | None,
    *,
    pod_name: str,
    pod_uid: str,
    service_account_namespace: str,
) -> Reporter | Refusal:
    """The replica the token's pod is, or why it may not report for ``job``.

    ``pod`` is the cached pod of that name in the job's namespace (None: not cached)."""
    meta = job.get("metadata") or {}
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    if service_account_namespace != ns:
        return Refusal(403, f"a token of namespace {service_account_namespace!r} reports for {ns}")
    if not pod_name or not pod_uid:
        return Refusal(403, "the token is not bound to a pod (a projected pod token is needed)")
    if pod is None:
        return Refusal(403, f"pod {pod_name} is not a pod of {ns}/{name}, or is gone")
    pmeta = pod.get("metadata") or {}
    if pmeta.get("uid") != pod_uid:
        return Refusal(403, f"pod {pod_name} ({pod_uid}) is gone: its name is another pod's now")
    if not _controlled_by(pmeta.get("ownerReferences"), meta.get("uid")):
        return Refusal(403, f"pod {pod_name} is not a pod of {ns}/{name}")
    if pmeta.get("deletionTimestamp"):
        # its replacement's reports are the ones that count
        return Refusal(403, f"pod {pod_name} is being deleted")
    rtype, index = replica_type_of(pod), replica_index_of(pod)
    spelled = _spec_spelling(job, rtype)
    if spelled is None or index is None:
        return Refusal(403, f"pod {pod_name} carries no replica type and index of {name}")
    node = (pod.get("spec") or {}).get("nodeName") or ""
    return Reporter(spelled, index, pod_name, pod_uid, node if isinstance(node, str) else "")


def _controlled_by(refs: object, uid: object) -> bool:
    if not isinstance(refs, Sequence) or not uid:
        return False
    return any(
        isinstance(r, Mapping) and r.get("controller") is True and r.get("uid") == uid for r in refs
    )


def _spec_spelling(job: Mapping[str, Any], rtype: str | None) -> str | None:
    """The replica type as the spec spells it ("Worker"), from the pod's label ("worker")."""
    if rtype is None:
        return None
    specs = (job.get("spec") or {}).get("tfReplicaSpecs")
    if not isinstance(specs, Mapping):
        return None
    return next((k for k in specs if isinstance(k, str) and k.lower() == rtype), None)
