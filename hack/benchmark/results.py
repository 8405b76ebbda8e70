"""One phase's figures."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from hack.benchmark.audit import Requests
from hack.benchmark.common import pct
from hack.benchmark.control_plane import Usage


@dataclass
class PhaseResult:
    name: str
    mode: str
    namespace: str
    requests: Requests
    creation_s: float | None  # submit -> last pod/service created (server time)
    expected_objects: int
    created_objects: int
    wall_s: float
    jobs_succeeded: int = 0
    running_lat: list[float] = field(default_factory=list)
    #: the same, for the pods that started after the harness had submitted every job
    running_lat_after_submit: list[float] = field(default_factory=list)
    #: how long the harness took to submit the jobs
    submit_s: float | None = None
    succeeded_lat: list[float] = field(default_factory=list)
    cpu_s: float | None = None
    #: CPU once ready (the start), and once every job succeeded and the phase settled:
    #: what is left of cpu_s after it is the pods' release and the stop
    cpu_ready_s: float | None = None
    cpu_settled_s: float | None = None
    peak_rss: int | None = None
    #: RSS once ready, before the first TFJob
    idle_rss: int | None = None
    #: RSS once every job succeeded, with all its pods and services still cached
    settled_rss: int | None = None
    #: exec → the controller's first list request (its informers starting)
    startup_s: float | None = None
    profiled: bool = False
    #: pods deleted → all gone, their tracking finalizers released (ours only)
    released_s: float | None = None
    #: 1-minute load average at the end of the phase (the machine may be shared)
    load: float = field(default_factory=lambda: os.getloadavg()[0])
    #: the report's column for a controller phase ("ours", "upstream, 4 threads")
    title: str = ""
    #: what each control-plane component used during the phase
    control_plane: dict[str, Usage] = field(default_factory=dict)
    #: etcd's database size at the end of the phase (bytes)
    etcd_db: int | None = None

    def cpu_parts(self) -> tuple[float, float, float] | None:
        """CPU seconds of the start (until ready), of the work (until every job
        succeeded and the phase settled) and of the end (the pods' release, the stop)."""
        if self.cpu_s is None or self.cpu_ready_s is None or self.cpu_settled_s is None:
            return None
        return (
            self.cpu_ready_s,
            self.cpu_settled_s - self.cpu_ready_s,
            self.cpu_s - self.cpu_settled_s,
        )

    @classmethod
    def measured(
        cls, name: str, mode: str, ns: str, reqs: Requests, objects: int, wall: float, **extra: Any
    ) -> PhaseResult:
        return cls(
            name=name,
            mode=mode,
            namespace=ns,
            requests=reqs,
            creation_s=reqs.creation_time(objects),
            expected_objects=objects,
            created_objects=len(reqs.creates_t),
            wall_s=wall,
            **extra,
        )

    def figures(self) -> dict[str, Any]:
        """The raw numbers for results.json."""

        def quantiles(values: list[float]) -> dict[str, float | None]:
            return {"p50": pct(values, 50), "p99": pct(values, 99)}

        return {
            "mode": self.mode,
            "creation_s": self.creation_s,
            "wall_s": self.wall_s,
            "jobs_succeeded": self.jobs_succeeded,
            "running_latency_s": quantiles(self.running_lat),
            "submit_s": self.submit_s,
            "running_latency_after_submit_s": quantiles(self.running_lat_after_submit),
            "succeeded_latency_s": quantiles(self.succeeded_lat),
            "cpu_s": self.cpu_s,
            "cpu_ready_s": self.cpu_ready_s,
            "cpu_settled_s": self.cpu_settled_s,
            "peak_rss_bytes": self.peak_rss,
            "idle_rss_bytes": self.idle_rss,
            "settled_rss_bytes": self.settled_rss,
            "startup_s": self.startup_s,
            "released_s": self.released_s,
            "control_plane": {
                name: {"cpu_s": u.cpu_s, "peak_rss_bytes": u.peak_rss}
                for name, u in self.control_plane.items()
            },
            "etcd_db_bytes": self.etcd_db,
            "requests": {
                f"{v} {r} {c}": k for (v, r, c), k in sorted(self.requests.by_verb.items())
            },
        }


@dataclass
class ModeRun:
    """One QPS mode's phases: the controllers' (ours first) and the floor's."""

    controllers: list[PhaseResult]
    floor: PhaseResult
