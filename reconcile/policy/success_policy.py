"""successPolicy: when the job has succeeded (docs/semantics.md#how-a-job-ends).

The deciding replica type is Chief/Master when the job has one with pods, else Worker;
other types (PS, Evaluator) never decide. It has succeeded when every replica of it has,
or, for Worker under the default successPolicy, when worker 0 alone has (AllWorkers
waits for every worker).
"""

from __future__ import annotations

from collections.abc import Mapping

from reconcile.api.labels import coordinator
from reconcile.api.models import ReplicaSpec, TFJob
from reconcile.api.names import ReplicaType, SuccessPolicy
from reconcile.api.status_types import parse_indexes
from reconcile.policy.restart import ReplicaAccount


def deciding_type(specs: Mapping[str, ReplicaSpec]) -> str | None:
    """The replica type whose outcome is the job's: Chief/Master (with pods), else
    Worker, else none (other types never decide)."""
    chief = coordinator(specs)
    if chief is not None:
        return chief
    return ReplicaType.WORKER if ReplicaType.WORKER in specs else None


def succeeded(job: TFJob, accounts: Mapping[str, ReplicaAccount]) -> bool:
    """The job's successPolicy holds over this pass's replica accounts."""
    decider = deciding_type(job.replica_specs)
    if decider is None:
        return False
    status = accounts[decider].status
    if status.succeeded >= job.replica_specs[decider].count:
        return True
    if decider == ReplicaType.WORKER and job.spec.success_policy != SuccessPolicy.ALL_WORKERS:
        return 0 in parse_indexes(status.succeeded_indexes)
    return False
