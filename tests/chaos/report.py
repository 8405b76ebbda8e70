"""The run's report: what was injected, the failovers, and the violations, as text and
as JSON (chaos-out/seed-<N>.{txt,json})."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any

from tests.chaos.actions import Death
from tests.chaos.audit import AuditChecks

#: Lease duration plus a retry period: the most a failover should take.
FAILOVER_GOAL = 17.0


@dataclass(frozen=True)
class Failover:
    cause: str
    died: str
    successor: str | None
    #: leader death -> the successor's Lease write taking it over
    acquire_s: float | None
    #: leader death -> the successor's first workload write (pods, services, status, events)
    first_write_s: float | None


def failovers(deaths: list[Death], audit: AuditChecks) -> list[Failover]:
    out = []
    for d in deaths:
        got = audit.successor(d.identity, d.t)
        if got is None:
            out.append(Failover(d.cause, d.identity, None, None, None))
        else:
            holder, acquire, first = got
            out.append(
                Failover(
                    d.cause,
                    d.identity,
                    holder,
                    round(acquire, 2),
                    None if first is None else round(first, 2),
                )
            )
    return out


def _stats(values: list[float]) -> dict[str, float | None]:
    return {
        "max": round(max(values), 2) if values else None,
        "mean": round(mean(values), 2) if values else None,
    }


@dataclass
class Report:
    seed: int
    size: dict[str, Any]
    pods: int
    seconds: float = 0.0
    faults: dict[str, int] = field(default_factory=dict)
    faults_skipped: dict[str, int] = field(default_factory=dict)
    actions: dict[str, int] = field(default_factory=dict)
    watch_faults: dict[str, int] = field(default_factory=dict)
    failovers: list[Failover] = field(default_factory=list)
    leader_transitions: int = 0
    replica_exits: list[tuple[str, int]] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)
    audit_events: int = 0
    controller_writes: int = 0
    #: the kubelet stand-in's retries of what kwok gave up on, by why (never the
    #: controller's work: a pod held only by our finalizer is not nudged)
    kubelet_nudges: dict[str, int] = field(default_factory=dict)
    violations: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        acquire = [f.acquire_s for f in self.failovers if f.acquire_s is not None]
        first = [f.first_write_s for f in self.failovers if f.first_write_s is not None]
        return {
            "failover_acquire_s": _stats(acquire),
            "failover_first_workload_write_s": _stats(first),
            "failovers_within_goal": sum(1 for a in acquire if a <= FAILOVER_GOAL),
            "failovers_unmeasured": sum(1 for f in self.failovers if f.acquire_s is None),
            "violations": len(self.violations),
        }

    def write(self, out: Path) -> tuple[Path, Path]:
        out.mkdir(parents=True, exist_ok=True)
        js, txt = out / f"seed-{self.seed}.json", out / f"seed-{self.seed}.txt"
        js.write_text(json.dumps({**asdict(self), "summary": self.summary()}, indent=2))
        txt.write_text(self.text())
        return js, txt

    def text(self) -> str:
        s = self.summary()
        kills = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items()))
        skipped = ", ".join(f"{k} {v}" for k, v in sorted(self.faults_skipped.items())) or "none"
        lines = [
            f"chaos run, seed {self.seed}: {self.size['jobs']} jobs ({self.pods} pods), "
            f"{self.seconds:.0f}s",
            f"pod faults applied: {kills} (skipped: {skipped})",
            "actions: " + ", ".join(f"{k} {v}" for k, v in sorted(self.actions.items())),
            "watch faults: " + ", ".join(f"{k} {v}" for k, v in sorted(self.watch_faults.items())),
            f"leader transitions (audit): {self.leader_transitions}; replica exits: "
            + ", ".join(f"{i}={c}" for i, c in self.replica_exits),
            f"failovers: {len(self.failovers)}; leader death -> successor's Lease write: "
            f"max {s['failover_acquire_s']['max']}s mean {s['failover_acquire_s']['mean']}s "
            f"(goal <= {FAILOVER_GOAL:g}s, {s['failovers_within_goal']} within); "
            f"-> first workload write: max {s['failover_first_workload_write_s']['max']}s "
            f"mean {s['failover_first_workload_write_s']['mean']}s",
        ]
        for f in self.failovers:
            lines.append(
                f"  {f.cause:28s} {f.died} -> {f.successor}: lease {f.acquire_s}s, "
                f"first write {f.first_write_s}s"
            )
        lines.append("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items())))
        lines.append(
            f"audit: {self.audit_events} events, {self.controller_writes} controller writes"
        )
        nudges = ", ".join(f"{k} {v}" for k, v in sorted(self.kubelet_nudges.items()))
        lines.append(f"kubelet stand-in nudges: {sum(self.kubelet_nudges.values())} ({nudges or 'none'})")
        lines.append(f"violations: {len(self.violations)}")
        for v in self.violations:
            lines.append(f"  {v['kind']}: {v['what']}")
        return "\n".join(lines) + "\n"
