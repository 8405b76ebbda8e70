"""runPolicy.backoffLimit: how many restarts the job may take before it fails.

Restarts are summed over every replica type: failures a restart policy retries and
container restarts done by the kubelet in place (reconcile.policy.restart accounts
them); disruptions are not restarts and never count. No limit means unlimited.
"""

from __future__ import annotations

from collections.abc import Mapping

from reconcile.api.models import TFJob
from reconcile.policy.restart import ReplicaAccount


def exceeded(job: TFJob, accounts: Mapping[str, ReplicaAccount]) -> bool:
    policy = job.spec.run_policy
    limit = policy.backoff_limit if policy is not None else None
    return limit is not None and sum(a.status.restarts for a in accounts.values()) > limit
