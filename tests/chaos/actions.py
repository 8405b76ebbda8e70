"""The big actions (one at a time: controller SIGKILLs, leader partitions, apiserver and
etcd restarts, suspend/resume waves) and the watch faults, against the controller pair.

A leader's death (SIGKILL, or the moment its proxy partitions it) is recorded with its
wall-clock time; the audit log later says when the successor's first Lease write and
first workload write arrived (report.failovers).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass, field

from tests.chaos.env import Api
from tests.chaos.history import History, true_condition
from tests.chaos.model import JobModel
from tests.chaos.plan import (
    APISERVER,
    BURST,
    ETCD,
    KILL,
    LATENCY,
    PARTITION,
    STALL,
    STATUS,
    WAVE,
    Action,
    WatchFault,
)
from tests.chaos.podfaults import quiet
from tests.chaos.progress import say
from tests.chaos.replicas import LEASE_NAME, LEASE_NS, Replica, Supervisor
from tests.conftest import Cluster

#: A failover should take the lease duration plus a retry period; give it room.
FAILOVER_PATIENCE = 60.0


@dataclass(frozen=True)
class Death:
    t: float  # wall clock
    identity: str
    cause: str


@dataclass
class Actions:
    cluster: Cluster
    api: Api
    history: History
    supervisor: Supervisor
    models: list[JobModel]
    ns: str
    rng: random.Random
    #: resume as soon as the Suspended condition is stored, while the suspended pods may
    #: still be terminating (off: once they are gone); see docs/development.md#chaos
    quick_resume: bool = False
    deaths: list[Death] = field(default_factory=list)
    done: Counter[str] = field(default_factory=Counter)
    watch_faults: Counter[str] = field(default_factory=Counter)

    # --- the controller pair ------------------------------------------------------

    async def holder(self) -> str:
        status, lease = await self.api.call(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{LEASE_NAME}"
        )
        return (
            str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")
            if status == 200
            else ""
        )

    async def leader(self) -> Replica | None:
        r = self.supervisor.by_identity(await self.holder())
        return r if r is not None and r.alive() else None

    async def steady(self, timeout: float = 120) -> Replica | None:
        """Both replicas running and one of them holding the lease."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(r.alive() for r in self.supervisor.replicas):
                leader = await self.leader()
                if leader is not None:
                    return leader
            await asyncio.sleep(0.5)
        say("WARNING: the controller pair is not steady")
        return None

    async def _new_leader(self, old: str) -> None:
        deadline = time.monotonic() + FAILOVER_PATIENCE
        while time.monotonic() < deadline:
            holder = await self.holder()
            r = self.supervisor.by_identity(holder)
            if holder and holder != old and r is not None and r.alive():
                return
            await asyncio.sleep(0.25)
        say(f"WARNING: no new leader {FAILOVER_PATIENCE:.0f}s after {old} went")

    async def kill_controller(self, trigger: str, follower: bool = False) -> None:
        leader = await self.steady()
        if trigger == BURST:
            await self.history.until(lambda: self.history.burst(3, 1.5), 40)
        elif trigger == STATUS:
            seen = self.history.status_changes
            await self.history.until(lambda: self.history.status_changes > seen, 30)
        leader = await self.leader() or leader
        others = [r for r in self.supervisor.replicas if r is not leader and r.alive()]
        target = others[0] if follower and others else leader
        if target is None:
            say("no replica to kill")
            return
        # Before the kill: the supervisor restarts the replica under a new identity.
        identity, t = target.identity, time.time()
        await target.kill()
        self.done[f"{KILL} ({trigger}{', follower' if target is not leader else ''})"] += 1
        self.done[KILL] += 1
        say(f"SIGKILL {identity} ({'leader' if target is leader else 'follower'}, {trigger})")
        if target is leader:
            self.deaths.append(Death(t, identity, f"sigkill/{trigger}"))
            await self._new_leader(identity)

    async def partition_leader(self) -> None:
        leader = await self.steady()
        if leader is None:
            return
        leader.held_down = True
        t = time.time()
        leader.proxy.partition()
        self.deaths.append(Death(t, leader.identity, "partition"))
        self.done[PARTITION] += 1
        say(f"partitioned the leader {leader.identity}")
        await self._new_leader(leader.identity)
        # It must notice on its own (renew deadline) and exit; any write it still lands
        # after the heal is a fencing violation.
        await leader.exited(30)
        leader.proxy.heal()
        leader.held_down = False
        say(
            f"healed {leader.slot}'s proxy ({leader.identity} {'still running' if leader.alive() else 'exited'})"
        )

    async def restart(self, component: str, kind: str) -> None:
        say(f"restarting {component}")
        await asyncio.to_thread(self.cluster.restart, component)
        await self.api.call("GET", "/readyz")
        # kube-scheduler is not under test, and a binding cut off by the restart can leave
        # its cache "corrupted" (its own log says so) and it schedules nothing more:
        # restart it, as its liveness probe would, so the run measures the controller.
        await asyncio.to_thread(self.cluster.restart, "kube-scheduler")
        self.done[kind] += 1
        say(f"{component} back (and kube-scheduler restarted)")

    async def wave(self, a: Action) -> None:
        """Suspend a share of the quiet jobs at once (the controller deletes all their pods),
        then resume them (it creates them all again): a burst through the token bucket."""
        candidates = [
            m
            for m in self.models
            if m.outcome is None and not m.lock.locked() and quiet(self.history, m)
        ]
        chosen = self.rng.sample(candidates, round(len(candidates) * a.share))
        for m in chosen:
            await m.lock.acquire()
        try:
            say(f"suspend wave: {len(chosen)} jobs")
            await asyncio.gather(*(self._suspend(m, True) for m in chosen))
            done = await self.history.until(
                lambda: all(self._suspended_and_empty(m) for m in chosen), 180
            )
            if not done:
                say("WARNING: the suspended jobs kept pods for 180s")
            await asyncio.gather(*(self._suspend(m, False) for m in chosen))
            if a.kill_in_resume:
                await self.kill_controller(BURST)
            back = await self.history.until(
                lambda: all(m.spoiled or quiet(self.history, m) for m in chosen), 240
            )
            if not back:
                say("WARNING: resumed jobs not all running after 240s")
            self.done[WAVE] += 1
        finally:
            for m in chosen:
                m.lock.release()

    def _suspended_and_empty(self, m: JobModel) -> bool:
        """Suspended, and its pods gone from the API, not merely terminating: the pods a
        suspend deleted must not end (exit 137) in a resumed job's view."""
        job = self.history.jobs.by_name(m.name)
        return (
            job is not None
            and bool(true_condition(job, "Suspended"))
            and (self.quick_resume or not self.history.job_pods(m.name))
        )

    async def _suspend(self, m: JobModel, on: bool) -> None:
        await self.api.patch(
            f"/apis/kubeflow.org/v1/namespaces/{self.ns}/tfjobs/{m.name}",
            {"spec": {"runPolicy": {"suspend": on}}},
        )

    async def run_action(self, a: Action) -> None:
        if a.kind == KILL:
            await self.kill_controller(a.trigger, a.follower)
        elif a.kind == PARTITION:
            await self.partition_leader()
        elif a.kind == APISERVER:
            await self.restart("kube-apiserver", APISERVER)
        elif a.kind == ETCD:
            await self.restart("etcd", ETCD)
        elif a.kind == WAVE:
            await self.wave(a)

    # --- watch faults -------------------------------------------------------------

    async def watch_fault(self, f: WatchFault) -> None:
        leader = await self.leader()
        replicas = self.supervisor.replicas
        target = leader if f.leader and leader is not None else replicas[int(f.t) % len(replicas)]
        if target.proxy.partitioned:  # cut off already: the other one, then
            target = next(r for r in replicas if r is not target)
        proxy = target.proxy
        self.watch_faults[f.kind] += 1
        if f.kind == STALL:
            say(f"watch fault: stall {target.slot} for {f.seconds:.1f}s")
            await proxy.stall(f.seconds)
        elif f.kind == LATENCY:
            say(f"watch fault: {f.seconds * 1000:.0f} ms latency on {target.slot} for 10s")
            await proxy.latency(f.seconds, 10)
        else:
            n = proxy.reset()
            say(f"watch fault: reset {n} connections of {target.slot}")
