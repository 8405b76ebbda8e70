"""What each job must end as: its shape and run policies, and what the faults done to it
so far must have done (docs/semantics.md#run-policies).

- a graceful delete, a force delete (grace 0) or an eviction of a pod the controller knew
  to be running is a disruption: replaced, never counted against backoffLimit;
- a container killed (exit 137) is a retry, counted once in ``restarts``, under OnFailure
  and Always (the kubelet restarts it in place: same pod, Running, restartCount up by
  one) and under ExitCode (≥ 128: the pod fails and the controller replaces it); it ends
  the job under Never (``failed`` 1, Failed). A retry past ``backoffLimit`` fails the job
  with the backoff reason;
- a job that survives its faults Succeeds once its chief (or worker 0) exits 0.

The driver applies a fault to the model *before* it sends it, so the stored status can
never legitimately be ahead of the model; when the fault certainly did not happen, it
takes it back (``undo``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.cluster.policy_helpers import make_job

GRACEFUL, FORCE, EVICT = "graceful", "force", "evict"
EXIT = "exit137"
KILL_KINDS = (GRACEFUL, FORCE, EVICT)

SUCCEEDED, FAILED = "Succeeded", "Failed"


@dataclass(frozen=True)
class Shape:
    prefix: str
    chief: str | None = None
    ps: tuple[int, str] | None = None
    workers: tuple[int, str] | None = (2, "OnFailure")
    backoff_limit: int | None = None
    clean_pod_policy: str | None = None


#: Mixed shapes and policies; job i has shape i mod len.
SHAPES = (
    Shape(
        "onf",
        chief="OnFailure",
        workers=(2, "OnFailure"),
        backoff_limit=3,
        clean_pod_policy="Running",
    ),
    Shape("exc", workers=(3, "ExitCode")),
    Shape("nev", chief="Never", ps=(1, "Never"), workers=(2, "Never")),
    Shape("lim", chief="Never", workers=(2, "ExitCode"), backoff_limit=1),
    Shape(
        "alw",
        chief="OnFailure",
        ps=(1, "Always"),
        workers=(2, "Always"),
        backoff_limit=4,
        clean_pod_policy="All",
    ),
    Shape("one", workers=(1, "OnFailure")),
    Shape(
        "big",
        chief="ExitCode",
        ps=(2, "OnFailure"),
        workers=(4, "OnFailure"),
        backoff_limit=6,
        clean_pod_policy="None",
    ),
)


@dataclass(eq=False)
class JobModel:
    name: str
    ns: str
    shape: Shape
    restarts: Counter[str] = field(default_factory=Counter)
    disruptions: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    #: (condition type, reason, message) once decided
    outcome: tuple[str, str, str] | None = None
    faults: Counter[str] = field(default_factory=Counter)
    #: serializes what the driver does to the job (a fault, a suspend/resume)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: its status counted more than was done (a violation): it can never match the model
    #: again, so nothing waits for it to, and no more faults are aimed at it
    spoiled: bool = False

    def body(self) -> dict[str, Any]:
        s = self.shape
        rp: dict[str, Any] = {}
        if s.backoff_limit is not None:
            rp["backoffLimit"] = s.backoff_limit
        if s.clean_pod_policy is not None:
            rp["cleanPodPolicy"] = s.clean_pod_policy
        return make_job(self.name, chief=s.chief, ps=s.ps, workers=s.workers, run_policy=rp or None)

    @property
    def specs(self) -> dict[str, Any]:
        return dict(self.body()["spec"]["tfReplicaSpecs"])

    def slots(self) -> list[tuple[str, int]]:
        return [(rt, i) for rt, s in sorted(self.specs.items()) for i in range(s["replicas"])]

    def decider(self) -> str:
        """The pod whose exit 0 succeeds the job."""
        rtype = "chief" if "Chief" in self.specs else "worker"
        return f"{self.name}-{rtype}-0"

    def counts(self, rtype: str) -> tuple[int, int, int]:
        """(restarts, disruptions, failed) the status must show for rtype."""
        return self.restarts[rtype], self.disruptions[rtype], self.failed[rtype]

    def apply(self, kind: str, rtype: str) -> Any:
        """Record a fault; returns a token for ``undo``."""
        before = (
            Counter(self.restarts),
            Counter(self.disruptions),
            Counter(self.failed),
            self.outcome,
        )
        self.faults[kind] += 1
        if kind in KILL_KINDS:
            self.disruptions[rtype] += 1
        elif self.specs[rtype]["restartPolicy"] == "Never":
            self.failed[rtype] = 1
            self.outcome = (
                FAILED,
                "TFJobFailed",
                f"TFJob {self.ns}/{self.name} has failed because 1 {rtype} replica(s) failed.",
            )
        else:
            self.restarts[rtype] += 1
            limit = self.shape.backoff_limit
            if limit is not None and sum(self.restarts.values()) > limit:
                self.outcome = (
                    FAILED,
                    "TFJobFailed",
                    f"Job {self.name} has failed because it has reached the specified backoff"
                    " limit",
                )
        return (kind, before)

    def undo(self, token: Any) -> None:
        kind, (self.restarts, self.disruptions, self.failed, self.outcome) = token
        self.faults[kind] -= 1

    def succeed(self) -> None:
        self.outcome = (
            SUCCEEDED,
            "TFJobSucceeded",
            f"TFJob {self.ns}/{self.name} successfully completed.",
        )


def build_models(n: int, ns: str) -> list[JobModel]:
    return [
        JobModel(f"{SHAPES[i % len(SHAPES)].prefix}-{i:02d}", ns, SHAPES[i % len(SHAPES)])
        for i in range(n)
    ]
