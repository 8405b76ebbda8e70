"""What the reconciler remembers of each job between its passes, in one place.

Everything else a pass needs it reads afresh from the caches; this is what the caches
cannot say:
- the job's spec, parsed, validated and defaulted once per spec object (api.spec);
- creates the apiserver keeps refusing, and since when (policy.failures);
- when the job's status was last written, to pace progress-only writes (the pacer)
  and writes of training progress alone (the training pacer);
- its replicas' training-progress reports (reconcile.sync.progress);
- the job its handed-off creates were planned for, so they are dropped when the job
  changes under them (``JobRecord.planned_for``);
- while its own writes are not all observed: the pods its last progress report was
  computed from (``reported``), and whether its status write is still in the background
  (``status_in_flight``);
- the pods its last planned pass read, so that the next reads only those that changed
  (``observed``).

``forget`` drops all of it when the job is gone; nothing else removes a job's memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from controller.types import Pacer, SlotGate
from reconcile.api.spec import SpecCache
from reconcile.objects.observed import ObservedPod
from reconcile.policy.failures import CreateFailures
from reconcile.sync.progress import ProgressIntake


@dataclass(slots=True)
class JobRecord:
    #: (uid, generation, being deleted) of the job its handed-off creates are for
    planned_for: tuple[object, ...] | None = None
    #: waiting on its own writes: the generation and pod versions of its last report
    reported: tuple[object, ...] | None = None
    #: its status write was handed to the background and is not back yet
    status_in_flight: bool = False
    #: the pods its last planned pass read, by UID (reconcile.objects.observed
    #: ``observe_all``'s ``known``): the next pass reads only the ones that changed
    observed: Mapping[str, ObservedPod] | None = None


class JobMemory:
    def __init__(
        self,
        *,
        specs: SpecCache,
        failures: CreateFailures,
        pacer: Pacer,
        training_pacer: Pacer | None = None,
        training_gate: SlotGate | None = None,
        progress: ProgressIntake | None = None,
    ) -> None:
        self.specs = specs
        self.failures = failures
        self.pacer = pacer
        #: paces writes of trainingProgress alone (reconcile.sync.progress)
        self.training_pacer = training_pacer
        #: and all jobs' such writes together, a share of the status budget
        self.training_gate = training_gate
        #: the replicas' training-progress reports, when the endpoint is on
        self.progress = progress
        self._records: dict[str, JobRecord] = {}

    def record(self, key: str) -> JobRecord:
        """The job's record, made on first use."""
        rec = self._records.get(key)
        if rec is None:
            rec = self._records[key] = JobRecord()
        return rec

    def peek(self, key: str) -> JobRecord | None:
        """The job's record if it has one (reads never make one)."""
        return self._records.get(key)

    def forget(self, key: str) -> None:
        """The job is gone: drop everything remembered of it."""
        self._records.pop(key, None)
        self.specs.forget(key)
        self.failures.forget(key)
        self.pacer.forget(key)
        if self.training_pacer is not None:
            self.training_pacer.forget(key)
        if self.training_gate is not None:
            self.training_gate.forget(key)
        if self.progress is not None:
            self.progress.forget(key)

    def __len__(self) -> int:
        return len(self._records)
