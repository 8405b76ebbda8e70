"""One chaos run: its cluster, the controller pair behind their proxies, the jobs, the
three fault timelines, the end (every surviving job succeeded, every job deleted), the
invariants checked throughout, and the report."""

from __future__ import annotations

import asyncio
import random
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from tests.chaos.actions import Actions
from tests.chaos.audit import AuditChecks, AuditTail
from tests.chaos.env import Api, apiserver_port, cluster_down, cluster_up
from tests.chaos.history import History, counters, true_condition
from tests.chaos.model import FAILED, SUCCEEDED, JobModel, build_models
from tests.chaos.plan import Plan
from tests.chaos.podfaults import EXIT_ANNOTATION, PodFaults, quiet
from tests.chaos.progress import say
from tests.chaos.proxy import FaultProxy
from tests.chaos.replicas import LEASE_NAME, LEASE_NS, Replica, Supervisor
from tests.chaos.report import Report, failovers
from tests.chaos.violations import Violations
from tests.conftest import Cluster

NS = "chaos"
CONTROLLER_FLAGS = (
    "--leader-elect",
    f"--leader-election-namespace={LEASE_NS}",
    "--kube-api-qps=20",
    "--kube-api-burst=30",
    # Short replacement backoff, so retries take seconds, not minutes (as the cluster
    # tests do); nothing checked here depends on its length.
    "--restart-backoff-base=0.5",
    "--restart-backoff-max=2",
)
OPERATOR_SELECTOR = "training.kubeflow.org/operator-name=tfjob-controller"


async def _at(t0: float, t: float, then: Callable[[], Awaitable[None]]) -> None:
    await asyncio.sleep(max(0.0, t0 + t - time.monotonic()))
    await then()


class Run:
    def __init__(
        self, plan: Plan, out: Path, keep_cluster: bool, quick_resume: bool = False
    ) -> None:
        self.plan = plan
        self.quick_resume = quick_resume
        self.out = out
        self.keep_cluster = keep_cluster
        self.violations = Violations()
        #: the kubelet stand-in's nudges, by why (``_kubelet_nudges``)
        self.nudges: Counter[str] = Counter()
        self.models = build_models(plan.size.jobs, NS)
        self.by_name = {m.name: m for m in self.models}
        self.rng = random.Random(plan.seed * 7919)
        self.tasks: list[asyncio.Task[Any]] = []
        self.replicas: list[Replica] = []
        #: what the run is doing now, for the snapshot (``_keep_state``)
        self.phase = "starting the cluster"
        self.history: History | None = None

    async def main(self) -> Report:
        nodes = max(4, len(self.models) * 7 // 100 + 1)
        # an earlier run's snapshot would speak for this one
        (self.out / f"seed-{self.plan.seed}-state.txt").unlink(missing_ok=True)
        cluster = await asyncio.to_thread(cluster_up, nodes)
        done = False
        try:
            report = await self._run(cluster)
            done = True
            return report
        finally:
            if not done or len(self.violations):
                try:
                    self._keep_state()
                except Exception as e:  # never in the way of the cleanup below
                    say(f"no snapshot: {type(e).__name__}: {e}")
            # Synchronous on purpose: this must happen even while being cancelled.
            for r in self.replicas:
                if r.alive() and r.proc is not None and r.proc.proc is not None:
                    r.proc.proc.kill()
            for t in self.tasks:
                t.cancel()
            try:
                await asyncio.gather(*self.tasks, return_exceptions=True)
            finally:
                self._keep_logs(cluster)
                if not self.keep_cluster:
                    cluster_down()

    def _keep_logs(self, cluster: Cluster) -> None:
        logs = self.out / f"seed-{self.plan.seed}-logs"
        logs.mkdir(parents=True, exist_ok=True)
        for f in (cluster.dir / "logs").glob("chaos-*.log"):
            shutil.copy(f, logs / f.name)
        if len(self.violations):
            audit = cluster.dir / "logs" / "audit.log"
            if audit.exists():
                shutil.copy(audit, logs / "audit.log")

    def _keep_state(self) -> None:
        """Where a run that was interrupted, failed or broke an invariant stood: its phase
        and every job and pod as its watches last saw them (the replicas' logs say why)."""
        lines = [f"phase: {self.phase}", f"violations: {list(self.violations.items)}"]
        history = self.history
        if history is not None:
            for job in sorted(history.jobs.store.values(), key=lambda j: j["metadata"]["name"]):
                status = job.get("status") or {}
                conditions = [
                    f"{c.get('type')}={c.get('status')}({c.get('reason', '')})"
                    for c in status.get("conditions") or []
                ]
                lines.append(
                    f"job {job['metadata']['name']}: {' '.join(conditions)} "
                    f"{status.get('replicaStatuses')}"
                )
            for pod in sorted(history.pods.store.values(), key=lambda p: p["metadata"]["name"]):
                meta, status = pod["metadata"], pod.get("status") or {}
                lines.append(
                    f"pod {meta['name']} uid={meta.get('uid')} phase={status.get('phase')} "
                    f"node={(pod.get('spec') or {}).get('nodeName')} "
                    f"deleting={meta.get('deletionTimestamp')} finalizers={meta.get('finalizers')}"
                )
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / f"seed-{self.plan.seed}-state.txt").write_text("\n".join(lines) + "\n")

    @staticmethod
    async def _default_service_account(api: Api) -> None:
        """ServiceAccount admission refuses pods until KCM has made the namespace's
        default ServiceAccount."""
        path = f"/api/v1/namespaces/{NS}/serviceaccounts/default"
        deadline = time.monotonic() + 30
        while (await api.call("GET", path))[0] != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no default ServiceAccount in {NS}")
            await asyncio.sleep(0.02)

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self.tasks.append(task)
        return task

    async def _run(self, cluster: Cluster) -> Report:
        started = time.monotonic()
        api = Api.connect(cluster)
        try:
            return await self._with_api(cluster, api, started)
        finally:
            await api.close()

    async def _with_api(self, cluster: Cluster, api: Api, started: float) -> Report:
        status, body = await api.call("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
        if status not in (201, 409):
            raise RuntimeError(f"namespace {NS}: {status} {body}")
        await self._default_service_account(api)
        self.phase = "starting the watches and the controller pair"
        history = History(api, NS, self.by_name, self.violations)
        self.history = history
        self._spawn(history.run())
        await history.synced()
        audit = AuditChecks(LEASE_NS, LEASE_NAME, self.violations)
        tail = AuditTail(cluster.dir / "logs" / "audit.log")
        self._spawn(self._follow_audit(audit, tail))

        proxies = [FaultProxy(slot, apiserver_port(cluster)) for slot in "ab"]
        for p in proxies:
            await p.start()
        replicas = [Replica(p.name, cluster, p, CONTROLLER_FLAGS) for p in proxies]
        self.replicas = replicas
        await asyncio.gather(*(r.start() for r in replicas))
        supervisor = Supervisor(replicas)
        self._spawn(supervisor.run())
        actions = Actions(
            cluster, api, history, supervisor, self.models, NS, self.rng, self.quick_resume
        )
        pod_faults = PodFaults(api, history, self.models, NS)
        if await actions.steady() is None:
            raise RuntimeError("no leader among the replicas")

        t0 = time.monotonic()
        self.phase = "faults"
        self._spawn(self._progress(t0, pod_faults, actions, supervisor))
        self._spawn(self._kubelet_nudges(api, history))
        self._spawn(self._create_jobs(api))
        faults = self._spawn(
            asyncio.gather(
                *(_at(t0, f.t, partial(pod_faults.run_one, f)) for f in self.plan.pod_faults)
            )
        )
        watch = self._spawn(
            asyncio.gather(
                *(_at(t0, f.t, partial(actions.watch_fault, f)) for f in self.plan.watch_faults)
            )
        )
        for a in self.plan.actions:
            await asyncio.sleep(max(0.0, t0 + a.t - time.monotonic()))
            await actions.run_action(a)
        await faults
        watch.cancel()
        say("faults done; every surviving job now runs to Succeeded")

        for p in proxies:
            p.heal()
        for r in replicas:
            r.held_down = False
        self.phase = "healed: waiting for a steady pair"
        await actions.steady()
        self.phase = "finishing the jobs"
        await self._finish_jobs(api, history)
        self.phase = "deleting the jobs"
        await self._delete_jobs(api, history)
        self.phase = "stopping the replicas, reading the audit log"
        await supervisor.stop()
        await self._last_audit(api, audit, tail)

        report = Report(
            seed=self.plan.seed,
            size=self.plan.size.__dict__,
            pods=sum(len(m.slots()) for m in self.models),
            seconds=round(time.monotonic() - started, 1),
            faults=dict(pod_faults.applied),
            faults_skipped=dict(pod_faults.skipped),
            actions={k: v for k, v in actions.done.items()},
            watch_faults=dict(actions.watch_faults),
            failovers=failovers(actions.deaths, audit),
            leader_transitions=audit.transitions(),
            replica_exits=[e for r in replicas for e in r.exits],
            outcomes=dict(Counter(m.outcome[0] if m.outcome else "none" for m in self.models)),
            audit_events=audit.events_seen,
            controller_writes=len(audit.writes),
            kubelet_nudges=dict(self.nudges),
            violations=list(self.violations.items),
        )
        for p in proxies:
            await p.stop()
        return report

    async def _kubelet_nudges(self, api: Api, history: History) -> None:
        """kwok plays the kubelet, and gives up on a pod when the apiserver refuses one of
        its writes (a 500 while etcd restarts), where a kubelet would retry: the status
        patch that makes a bound pod Running (it stays Pending), or the kill of a deleted
        pod and its final delete (it stays terminating, forever occupying its index).
        Any change to the pod makes kwok look again, so a pod stuck so for NUDGE_AFTER
        gets an annotation touched: the kubelet's retry, not the controller's business.
        Never a pod that has ended and is held only by the controller's finalizer: letting
        it go is the controller's work, and a touch would requeue its job and hide a
        controller that never did. Every nudge is counted in the report, by why."""
        nudged: dict[str, float] = {}
        while True:
            await asyncio.sleep(5)
            now = time.time()
            for pod in list(history.pods.store.values()):
                meta = pod["metadata"]
                uid = meta.get("uid", "")
                why = _stuck(pod, now)
                if why is None or now - nudged.get(uid, 0.0) < NUDGE_AFTER:
                    continue
                nudged[uid] = now
                self.nudges[why] += 1
                say(f"kubelet stand-in: {meta['name']} {why}, kwok nudged")
                try:
                    await api.patch(
                        f"/api/v1/namespaces/{NS}/pods/{meta['name']}",
                        {"metadata": {"annotations": {"kwok.test/nudge": str(now)}}},
                    )
                except Exception as e:  # the apiserver restarting: next round
                    say(f"kubelet stand-in: nudge failed: {type(e).__name__}")

    async def _create_jobs(self, api: Api) -> None:
        sem = asyncio.Semaphore(10)

        async def create(m: JobModel) -> None:
            async with sem:
                status, body = await api.call(
                    "POST", f"/apis/kubeflow.org/v1/namespaces/{NS}/tfjobs", m.body()
                )
                if status not in (201, 409):
                    raise RuntimeError(f"create {m.name}: {status} {body}")

        await asyncio.gather(*(create(m) for m in self.models))
        say(f"{len(self.models)} TFJobs created")

    async def _follow_audit(self, audit: AuditChecks, tail: AuditTail) -> None:
        while True:
            audit.feed(await asyncio.to_thread(tail.read))
            await asyncio.sleep(1.0)

    async def _last_audit(self, api: Api, audit: AuditChecks, tail: AuditTail) -> None:
        """Everything up to a marker request sent now (the log is written asynchronously)."""
        marker = f"chaos-marker-{uuid.uuid4().hex[:10]}"
        await api.call("GET", f"/api/v1/namespaces/{marker}")
        events: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            events += await asyncio.to_thread(tail.read)
            if any((e.get("objectRef") or {}).get("name") == marker for e in events):
                break
            await asyncio.sleep(0.3)
        audit.finish(events)
        tail.close()

    async def _progress(
        self, t0: float, pod_faults: PodFaults, actions: Actions, supervisor: Supervisor
    ) -> None:
        while True:
            await asyncio.sleep(15)
            applied = ", ".join(f"{k} {v}" for k, v in sorted(pod_faults.applied.items()))
            skipped = sum(pod_faults.skipped.values())
            big = ", ".join(f"{k} {v}" for k, v in sorted(actions.done.items()) if "(" not in k)
            holder = await actions.holder()
            say(
                f"pod faults {applied or 'none'} (skipped {skipped}) | {big or 'no actions yet'}"
                f" | watch faults {sum(actions.watch_faults.values())}"
                f" | leader deaths {len(actions.deaths)} | leader {holder or '-'}"
                f" | violations {len(self.violations)}"
            )

    async def _finish_jobs(self, api: Api, history: History) -> None:
        t_end = time.monotonic()

        async def finish(m: JobModel) -> None:
            async with m.lock:
                if m.outcome is not None:
                    return
                if not await history.until(lambda: m.spoiled or quiet(history, m), 180):
                    job = history.jobs.by_name(m.name) or {}
                    self.violations.add(
                        "never-recovered",
                        f"{m.name}: not all running with its counts after 180s: "
                        f"{(job.get('status') or {}).get('replicaStatuses')}",
                    )
                    return
                if m.spoiled:
                    return  # reported already; deleted with the others at the end
                m.succeed()
                await api.patch(
                    f"/api/v1/namespaces/{NS}/pods/{m.decider()}",
                    {
                        "metadata": {
                            "annotations": {
                                EXIT_ANNOTATION: "0",
                                "kwok.test/container": "tensorflow",
                            }
                        }
                    },
                )

        await asyncio.gather(*(finish(m) for m in self.models))

        def ended(m: JobModel) -> bool:
            job = history.jobs.by_name(m.name)
            return job is not None and true_condition(job, SUCCEEDED, FAILED) is not None

        await history.until(lambda: all(ended(m) for m in self.models if m.outcome), 180)
        for m in self.models:
            job = history.jobs.by_name(m.name) or {}
            end = true_condition(job, SUCCEEDED, FAILED)
            got = (end["type"], end.get("reason", ""), end.get("message", "")) if end else None
            if m.outcome is not None and got != m.outcome:
                self.violations.add("outcome", f"{m.name} ended {got}, its policy says {m.outcome}")
            for rt in m.specs:
                have = counters(job.get("status") or {}, rt)
                if have != m.counts(rt):
                    self.violations.add(
                        "counted-once",
                        f"{m.name} {rt} (restarts, disruptions, failed) = {have}, "
                        f"the faults done say {m.counts(rt)}",
                    )
        say(
            f"every job ended ({time.monotonic() - t_end:.1f}s): "
            + ", ".join(
                f"{k} {v}"
                for k, v in Counter(
                    m.outcome[0] if m.outcome else "none" for m in self.models
                ).items()
            )
        )

    async def _delete_jobs(self, api: Api, history: History) -> None:
        await asyncio.gather(
            *(
                api.call("DELETE", f"/apis/kubeflow.org/v1/namespaces/{NS}/tfjobs/{m.name}")
                for m in self.models
            )
        )
        deadline = time.monotonic() + 180
        left: tuple[int, int] = (0, 0)
        while time.monotonic() < deadline:
            status, svcs = await api.call(
                "GET", f"/api/v1/namespaces/{NS}/services?labelSelector={OPERATOR_SELECTOR}"
            )
            pods = [
                p
                for p in history.pods.store.values()
                if OPERATOR_SELECTOR.split("=")[0] in (p["metadata"].get("labels") or {})
            ]
            left = (len(pods), len((svcs or {}).get("items") or []) if status == 200 else -1)
            if left == (0, 0):
                took = time.monotonic() - deadline + 180
                say(f"every job deleted; no pod or service left after {took:.1f}s")
                return
            await history.pulse.wait(1.0)
        self.violations.add(
            "orphans", f"{left[0]} pods and {left[1]} services left 180s after the jobs' deletion"
        )


#: How long a pod may stay bound and Pending before the kubelet stand-in nudges kwok.
NUDGE_AFTER = 20.0


def _stuck(pod: dict[str, Any], now: float) -> str | None:
    """Why kwok looks to have given up on ``pod``, or None."""
    meta, status = pod["metadata"], pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    if meta.get("deletionTimestamp"):
        if "kwok.test/hold-on-delete" in annotations:
            return None  # held on purpose
        if status.get("phase") in ("Succeeded", "Failed") and meta.get("finalizers"):
            # Ended, and kept by a finalizer (ours): kwok's final delete has nothing to
            # do until the controller lets it go. Not the kubelet's to retry.
            return None
        # deletionTimestamp is the request's time plus the grace period
        grace = float(meta.get("deletionGracePeriodSeconds") or 0)
        if now - (_epoch(meta["deletionTimestamp"]) - grace) < NUDGE_AFTER:
            return None
        return f"deleted and still {status.get('phase', 'Pending')}"
    if (
        pod.get("spec", {}).get("nodeName")
        and status.get("phase") == "Pending"
        and now - _epoch(meta.get("creationTimestamp")) >= NUDGE_AFTER
    ):
        return "bound and Pending"
    return None


def _epoch(timestamp: str | None) -> float:
    if not timestamp:
        return time.time()
    parsed = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return parsed.timestamp()


async def run(plan: Plan, out: Path, keep_cluster: bool, quick_resume: bool = False) -> Report:
    return await Run(plan, out, keep_cluster, quick_resume).main()
