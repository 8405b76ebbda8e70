"""Phase 1, ours (and with --compare upstream, the upstream controller's phases): the
controller runs as a process while the harness submits the jobs, finishes each chief
once all its pods run, and times status from watches."""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hack.benchmark.audit import audit_offset, audit_read, summarize_audit
from hack.benchmark.client import Http, watch
from hack.benchmark.common import (
    CONTROLLER_UA,
    HARNESS_UA,
    JOB_NAME_LABEL,
    OPERATOR_SELECTOR,
    ROLE_LABEL,
    RTYPE_LABEL,
    Mode,
    say,
)
from hack.benchmark.control_plane import ControlPlaneSampler, wait_quiet
from hack.benchmark.environment import (
    Env,
    create_namespace,
    delete_children,
    delete_namespace,
    wait_no_pods,
)
from hack.benchmark.results import PhaseResult
from hack.benchmark.sampling import ControllerProc
from hack.benchmark.workload import job_names, tfjob_body


@dataclass(frozen=True)
class ControllerPhase:
    """One controller phase: which controller, how it starts, whose requests count."""

    name: str  # results.json key, log prefix and namespace part: "ours", "upstream-4t"
    title: str  # the report's column: "ours", "upstream, 4 threads"
    ua: str  # the user agent its requests carry in the audit log
    start: Callable[[Env, Mode, Path], ControllerProc]
    profiled: bool = False


def ours_phase(threads: int, profile: bool, status_pace: float | None = None) -> ControllerPhase:
    """Ours as it ships, or with ``--status-pace`` set (a phase of its own beside it)."""
    if status_pace is None:
        name, title, flags = "ours", "ours", []
    else:
        name = f"ours-pace{round(status_pace * 1000)}ms"  # a namespace takes no dot
        title = f"ours, --status-pace {status_pace:g}"
        flags = [f"--status-pace={status_pace:g}"]
    return ControllerPhase(
        name,
        title,
        CONTROLLER_UA,
        lambda env, mode, out: ControllerProc.ours(
            env, mode, out, profile, threads, flags, log_name=name
        ),
        profile,
    )


class Tracker:
    """What the harness sees through its watches during the controller phase."""

    def __init__(self, replicas: int, finish: Any) -> None:
        self.replicas = replicas
        self.finish = finish  # callback(job, master_pod_name)
        self.pods_added: set[str] = set()
        self.services_added: set[str] = set()
        self.running: dict[str, set[str]] = defaultdict(set)  # job -> running pods
        self.masters: dict[str, str] = {}
        self.finished_jobs: set[str] = set()
        # (t, job, rtype, running count of that type in that job)
        self.pod_running: list[tuple[float, str, str, int]] = []
        self.running_by_type: dict[tuple[str, str], int] = Counter()
        self.seen_running: set[str] = set()
        self.master_succeeded: dict[str, float] = {}
        self.job_obs: dict[str, list[tuple[float, dict[str, int], bool]]] = defaultdict(list)
        self.job_succeeded: dict[str, float] = {}

    def on_pod(self, typ: str, pod: dict[str, Any], t: float) -> None:
        meta = pod["metadata"]
        name = meta["name"]
        labels = meta.get("labels") or {}
        job = labels.get(JOB_NAME_LABEL, "")
        rtype = labels.get(RTYPE_LABEL, "")
        if typ == "ADDED":
            self.pods_added.add(name)
        if labels.get(ROLE_LABEL) == "master":
            self.masters[job] = name
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Running", "Succeeded") and name not in self.seen_running:
            self.seen_running.add(name)
            self.running_by_type[(job, rtype)] += 1
            self.pod_running.append((t, job, rtype, self.running_by_type[(job, rtype)]))
            self.running[job].add(name)
            if len(self.running[job]) >= self.replicas and job not in self.finished_jobs:
                master = self.masters.get(job)
                if master:
                    self.finished_jobs.add(job)
                    self.finish(job, master)
        if phase == "Succeeded" and labels.get(ROLE_LABEL) == "master":
            self.master_succeeded.setdefault(job, t)

    def on_service(self, typ: str, svc: dict[str, Any], t: float) -> None:
        if typ == "ADDED":
            self.services_added.add(svc["metadata"]["name"])

    def on_job(self, typ: str, job: dict[str, Any], t: float) -> None:
        name = job["metadata"]["name"]
        status = job.get("status") or {}
        counts = {
            rt.lower(): int(rs.get("active") or 0) + int(rs.get("succeeded") or 0)
            for rt, rs in (status.get("replicaStatuses") or {}).items()
        }
        succeeded = any(
            c.get("type") == "Succeeded" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        self.job_obs[name].append((t, counts, succeeded))
        if succeeded:
            self.job_succeeded.setdefault(name, t)

    def running_samples(self) -> list[tuple[float, str, str, int, float]]:
        """(pod Running at, job, replica type, its count, latency to the status saying so)."""
        samples = []
        for t, job, rtype, n in self.pod_running:
            for t_obs, counts, _ in self.job_obs.get(job, []):
                if counts.get(rtype, 0) >= n:
                    samples.append((t, job, rtype, n, max(0.0, t_obs - t)))
                    break
        return samples

    def succeeded_latencies(self) -> list[float]:
        return [
            max(0.0, self.job_succeeded[j] - t)
            for j, t in self.master_succeeded.items()
            if j in self.job_succeeded
        ]


async def run_controller(
    env: Env, args: argparse.Namespace, mode: Mode, out: Path, phase: ControllerPhase
) -> PhaseResult:
    ns = f"bench-{phase.name}-{mode.slug}-{uuid.uuid4().hex[:5]}"
    tag = f"[{phase.name} {mode.label}]"
    profile = phase.profiled
    n, m = args.jobs, args.replicas
    harness = Http(env.base, env.ctx, HARNESS_UA, 100)
    watcher = Http(env.base, env.ctx, HARNESS_UA + "-watch", 0)
    tasks: list[asyncio.Task[Any]] = []
    ctl: ControllerProc | None = None
    try:
        await create_namespace(harness, ns)
        patch_sem = asyncio.Semaphore(50)

        async def finish_job(job: str, pod: str) -> None:
            async with patch_sem:
                status, body = await harness.req(
                    "PATCH",
                    f"/api/v1/namespaces/{ns}/pods/{pod}",
                    {"metadata": {"annotations": {"kwok.test/exit-code": "0"}}},
                    ctype="application/merge-patch+json",
                )
            if status != 200:
                say(f"WARNING: finishing {job} ({pod}): {status} {body}")

        def finish(job: str, pod: str) -> None:
            tasks.append(asyncio.ensure_future(finish_job(job, pod)))

        tr = Tracker(m, finish)
        synced = [asyncio.Event() for _ in range(3)]
        tasks += [
            asyncio.ensure_future(
                watch(
                    watcher,
                    f"/api/v1/namespaces/{ns}/pods",
                    tr.on_pod,
                    synced[0],
                    OPERATOR_SELECTOR,
                )
            ),
            asyncio.ensure_future(
                watch(
                    watcher,
                    f"/api/v1/namespaces/{ns}/services",
                    tr.on_service,
                    synced[1],
                    OPERATOR_SELECTOR,
                )
            ),
            asyncio.ensure_future(
                watch(
                    watcher, f"/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs", tr.on_job, synced[2]
                )
            ),
        ]
        t_sync = time.monotonic()
        while not all(e.is_set() for e in synced):
            failed = [t for t in tasks if t.done()]
            if failed:
                failed[0].result()  # raises the watch's error
                raise RuntimeError("a watch ended before it synced")
            if time.monotonic() - t_sync > 120:
                raise RuntimeError("the harness's watches did not sync in 120s")
            await asyncio.sleep(0.1)

        waited, busy = await wait_quiet()
        say(f"{tag} machine quiet after {waited:.1f}s (CPU {busy:.0f}% over the last second)")
        offset = audit_offset(env)
        plane = ControlPlaneSampler(env)
        plane.start()
        ctl = phase.start(env, mode, out)
        await ctl.wait_ready()
        ctl.mark_idle()
        say(
            f"{tag} controller ready (pid {ctl.proc.pid}"
            f"{', under pyinstrument' if profile else ''}); submitting {n} TFJobs x {m} "
            f"replicas into {ns}"
        )

        submit_sem = asyncio.Semaphore(50)

        async def submit(name: str) -> None:
            async with submit_sem:
                status, body = await harness.req(
                    "POST",
                    f"/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs",
                    tfjob_body(name, ns, m),
                )
            if status != 201:
                raise RuntimeError(f"submit {name}: {status} {body}")

        t0 = time.monotonic()
        await asyncio.gather(*(submit(j) for j in job_names(n)))
        submit_s = time.monotonic() - t0
        say(f"{tag} {n} TFJobs submitted in {submit_s:.1f}s")
        last = 0.0
        deadline = t0 + args.timeout
        t_created: float | None = None
        while True:
            ctl.sample()
            plane.sample()
            now = time.monotonic()
            created = len(tr.pods_added) + len(tr.services_added)
            if t_created is None and created >= 2 * n * m:
                t_created = now
            done = len(tr.job_succeeded)
            if now - last >= args.progress or done >= n:
                last = now
                say(
                    f"{tag} t={now - t0:5.1f}s pods {len(tr.pods_added)}/{n * m}"
                    f" services {len(tr.services_added)}/{n * m}"
                    f" running {len(tr.seen_running)} finishing {len(tr.finished_jobs)}"
                    f" succeeded {done}/{n} | controller cpu {ctl.cpu:.1f}s"
                    f" rss {ctl.peak_rss / 2**20:.0f}MB"
                )
            if done >= n:
                break
            if now > deadline:
                say(f"{tag} TIMEOUT after {args.timeout:.0f}s")
                break
            if ctl.proc.poll() is not None:
                say(f"{tag} controller exited ({ctl.proc.returncode}); see {ctl.log_path}")
                break
            await asyncio.sleep(0.25)
        wall = time.monotonic() - t0
        # Let trailing writes (a late status write, buffered events) land, then stop it.
        for _ in range(int(args.settle / 0.25)):
            ctl.sample()
            plane.sample()
            await asyncio.sleep(0.25)
        ctl.sample()
        settled_rss = ctl.rss_samples[-1][1] if ctl.rss_samples else None
        settled_cpu = ctl.cpu if ctl.rss_samples else None
        # The pods are deleted (as pod GC or the namespace's deletion would) while the
        # controller runs: each goes once the controller has taken its tracking
        # finalizer off, one patch a pod, counted with the rest of its requests.
        say(f"{tag} deleting the {n * m} pods; the controller lets them go")
        await delete_children(harness, ns, ("pods",))
        released_s = await wait_no_pods(harness, ns, args.timeout)
        gone = "never" if released_s is None else f"after {released_s:.1f}s"
        say(f"{tag} pods gone {gone}")
        ctl.stop()
        control_plane = plane.finish()
        etcd_db = plane.etcd_db_size()
        say(
            f"{tag} controller stopped: cpu {ctl.cpu:.1f}s, "
            f"peak rss {ctl.peak_rss / 2**20:.0f}MB; reading the audit log"
        )
        events = await audit_read(env, harness, offset)
        reqs = summarize_audit(events, phase.ua, ns)
        samples = tr.running_samples()
        running_lat = [s[-1] for s in samples]
        # the pods that started once every job was in: the control plane no longer
        # taking the submissions (the harness's own burst) beside the controller's work
        after_submit = [s[-1] for s in samples if s[0] - t0 >= submit_s]
        succeeded_lat = tr.succeeded_latencies()
        # Each sample of (b), slowest first, to tell where a tail comes from.
        rows = sorted(samples, key=lambda s: -s[-1])
        (out / f"running-{phase.name}-{mode.slug}.tsv").write_text(
            "t_since_submit_s\tjob\trtype\tnth\tlatency_ms\n"
            + "".join(
                f"{t - t0:.3f}\t{j}\t{r}\t{k}\t{lat * 1000:.1f}\n" for t, j, r, k, lat in rows
            )
        )
        return PhaseResult.measured(
            phase.name,
            mode.label,
            ns,
            reqs,
            2 * n * m,
            wall,
            jobs_succeeded=len(tr.job_succeeded),
            running_lat=running_lat,
            running_lat_after_submit=after_submit,
            submit_s=submit_s,
            succeeded_lat=succeeded_lat,
            cpu_s=ctl.cpu,
            cpu_ready_s=ctl.ready_cpu,
            cpu_settled_s=settled_cpu,
            peak_rss=ctl.peak_rss,
            idle_rss=ctl.idle_rss,
            settled_rss=settled_rss,
            startup_s=reqs.first_list - ctl.exec_t if reqs.first_list else None,
            profiled=profile,
            released_s=released_s,
            title=phase.title,
            control_plane=control_plane,
            etcd_db=etcd_db,
        )
    finally:
        if ctl is not None:
            ctl.stop()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await watcher.close()
        await delete_namespace(harness, ns)
        await harness.close()
