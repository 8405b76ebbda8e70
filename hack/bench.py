#!/usr/bin/env python3
"""Benchmark: the controller side by side with the floor, on one local apiserver.

    hack/bench [--jobs 200] [--replicas 8] [--qps unlimited,20/30] [--profile]
               [--keep-cluster] [--out bench-out]

For every QPS mode, two phases run one after the other on the same local control plane
(its own cluster directory, default <repo>/.cluster-bench, started with an audit log):

1. **ours**: tfjob-controller runs as a process; the harness submits N TFJobs (1 Chief +
   M-1 Workers each) at once, watches pods, services and TFJobs, and as soon as all M
   pods of a job run lets the chief exit 0 (one annotation patch per job; kwok finishes
   the pod). The phase ends when every job is Succeeded.
2. **floor**: a bare asyncio client (aiohttp + orjson, a semaphore as wide as the
   controller's connection pool, a token bucket at the same QPS) submits the same
   TFJobs and POSTs exactly the pod and service bodies the controller would (computed
   by the controller's own planner) into a fresh namespace. No controller runs.

Figures come from the apiserver's audit log (server-side timestamps, user agents
"tfjob-controller" and "tfjob-bench-floor"), the harness's watch events (status
latency) and psutil on the controller process (CPU, RSS). Writes a markdown table to
stdout and <out>/results.md, raw numbers to <out>/results.json, a plot of objects
created over time to <out>/created-over-time.png, and with --profile a pyinstrument
profile of the first controller run to <out>/profile.html and profile.txt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import ssl
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "hack"))

import aiohttp  # noqa: E402
import cluster as cluster_mod  # noqa: E402  (hack/cluster.py)
import orjson  # noqa: E402
import psutil  # noqa: E402

CONTROLLER_UA = "tfjob-controller"
FLOOR_UA = "tfjob-bench-floor"
HARNESS_UA = "tfjob-bench"
OPERATOR_SELECTOR = "training.kubeflow.org/operator-name=tfjob-controller"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
RTYPE_LABEL = "training.kubeflow.org/replica-type"
ROLE_LABEL = "training.kubeflow.org/job-role"

T_START = time.monotonic()


def say(msg: str) -> None:
    print(
        f"[bench {time.strftime('%H:%M:%S')} +{time.monotonic() - T_START:5.0f}s] {msg}", flush=True
    )


# --- modes --------------------------------------------------------------------------


@dataclass(frozen=True)
class Mode:
    qps: float  # <= 0: unlimited
    burst: int

    @property
    def label(self) -> str:
        return "unlimited" if self.qps <= 0 else f"{self.qps:g}/{self.burst}"

    @property
    def slug(self) -> str:
        return "unlimited" if self.qps <= 0 else f"qps{self.qps:g}"


def parse_modes(text: str) -> list[Mode]:
    modes = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        if part in ("unlimited", "0", "-1", "none"):
            modes.append(Mode(-1.0, 1))
            continue
        qps_s, _, burst_s = part.partition("/")
        qps = float(qps_s)
        burst = int(burst_s) if burst_s else max(int(qps * 1.5), 1)
        modes.append(Mode(qps, burst) if qps > 0 else Mode(-1.0, 1))
    if not modes:
        raise argparse.ArgumentTypeError("no QPS mode given")
    return modes


# --- the workload -------------------------------------------------------------------


def tfjob_body(name: str, namespace: str, replicas: int) -> dict[str, Any]:
    container = {"name": "tensorflow", "image": "bench/tf:none", "command": ["train"]}
    specs: dict[str, Any] = {}
    if replicas >= 2:
        specs["Chief"] = {
            "replicas": 1,
            "restartPolicy": "Never",
            "template": {"spec": {"containers": [container]}},
        }
        specs["Worker"] = {
            "replicas": replicas - 1,
            "restartPolicy": "Never",
            "template": {"spec": {"containers": [container]}},
        }
    else:
        specs["Worker"] = {
            "replicas": 1,
            "restartPolicy": "Never",
            "template": {"spec": {"containers": [container]}},
        }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runPolicy": {"cleanPodPolicy": "None"}, "tfReplicaSpecs": specs},
    }


def job_names(n: int) -> list[str]:
    return [f"bench-{i:04d}" for i in range(n)]


def planned_children(job: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Exactly the pod and service bodies the controller POSTs for a new job, from its
    own (pure) planner."""
    from reconcile.plan import PlanConfig, Snapshot, compute_plan
    from reconcile.spec import read_job

    snap = Snapshot(job=read_job(job), pods=[], services=[], now=datetime.now().astimezone())
    plan = compute_plan(snap, PlanConfig())
    return plan.create_pods, plan.create_services


# --- HTTP ---------------------------------------------------------------------------


class Bucket:
    """Token bucket with reservations: each take() may go into debt and sleeps it off."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = float(max(burst, 1))
        self.tokens = self.burst
        self.last = time.monotonic()

    async def take(self) -> None:
        if self.qps <= 0:
            return
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.qps)
        self.last = now
        self.tokens -= 1.0
        if self.tokens < 0:
            await asyncio.sleep(-self.tokens / self.qps)


class Http:
    def __init__(self, base: str, ctx: ssl.SSLContext, ua: str, limit: int) -> None:
        self.base = base
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=limit, ssl=ctx),
            headers={"User-Agent": ua, "Accept": "application/json"},
            read_bufsize=2**21,
        )

    async def close(self) -> None:
        await self.session.close()

    async def req(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        ctype: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        data = orjson.dumps(body) if body is not None else None
        headers = {"Content-Type": ctype} if data is not None else None
        async with self.session.request(
            method,
            self.base + path,
            data=data,
            headers=headers,
            params=params,
            timeout=aiohttp.ClientTimeout(total=60),
        ) as r:
            raw = await r.read()
            try:
                return r.status, orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                return r.status, raw.decode(errors="replace")


async def watch(
    http: Http,
    path: str,
    on_event: Any,
    synced: asyncio.Event,
    selector: str | None = None,
) -> None:
    """LIST then WATCH ``path`` forever, calling on_event(type, obj, t_monotonic)."""
    params = {"labelSelector": selector} if selector else {}
    status, lst = await http.req("GET", path, params=params)
    if status != 200:
        raise RuntimeError(f"list {path}: {status} {lst}")
    now = time.monotonic()
    for item in lst["items"]:
        on_event("ADDED", item, now)
    rv = lst["metadata"]["resourceVersion"]
    synced.set()
    while True:
        wparams = {
            **params,
            "watch": "1",
            "resourceVersion": rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "600",
        }
        try:
            async with http.session.get(
                http.base + path,
                params=wparams,
                timeout=aiohttp.ClientTimeout(total=None, sock_read=700),
            ) as r:
                while True:
                    line = await r.content.readline()
                    if not line:
                        break
                    t = time.monotonic()
                    ev = orjson.loads(line)
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        raise RuntimeError(f"watch {path}: {obj}")
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if ev.get("type") != "BOOKMARK":
                        on_event(ev["type"], obj, t)
        except (aiohttp.ClientError, TimeoutError):
            await asyncio.sleep(0.2)


# --- cluster ------------------------------------------------------------------------


@dataclass
class Env:
    dir: Path
    kubeconfig: Path
    base: str
    ctx: ssl.SSLContext
    audit: Path


def cluster_up(args: argparse.Namespace, pods_needed: int) -> Env:
    nodes = max(args.nodes, math.ceil(pods_needed * 1.25 / args.node_pods))
    say(
        f"starting the bench cluster in {cluster_mod.cluster_dir()} "
        f"({nodes} nodes x {args.node_pods} pods, audit log on)"
    )
    subprocess.run(
        [
            sys.executable,
            str(REPO / "hack" / "cluster.py"),
            "up",
            "--audit",
            f"--nodes={nodes}",
            f"--node-pods={args.node_pods}",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    d = cluster_mod.cluster_dir()
    state = cluster_mod.load_state(d)
    assert state is not None
    audit = d / "logs" / "audit.log"
    if not audit.exists():
        raise SystemExit(
            f"the cluster in {d} runs without an audit log; stop it with "
            f"TFJOB_CLUSTER_DIR={d} hack/cluster.sh down and run the bench again"
        )
    ctx = ssl.create_default_context(cafile=str(d / "pki" / "ca.crt"))
    ctx.load_cert_chain(str(d / "pki" / "admin.crt"), str(d / "pki" / "admin.key"))
    return Env(d, d / "kubeconfig", f"https://127.0.0.1:{state['ports']['apiserver']}", ctx, audit)


def cluster_down() -> None:
    subprocess.run(
        [sys.executable, str(REPO / "hack" / "cluster.py"), "down"],
        check=False,
        stdout=subprocess.DEVNULL,
    )


async def create_namespace(http: Http, ns: str) -> None:
    status, body = await http.req(
        "POST", "/api/v1/namespaces", {"metadata": {"name": ns, "labels": {"bench": "1"}}}
    )
    if status != 201:
        raise RuntimeError(f"create namespace {ns}: {status} {body}")


async def delete_namespace(http: Http, ns: str, limit_s: float = 180) -> None:
    """Remove pods and services at once (grace 0, so kwok need not act; one DELETE per
    object in parallel, as a collection delete runs them one by one), then the namespace,
    and wait until it is gone."""
    t0 = time.monotonic()
    opts = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    sem = asyncio.Semaphore(32)

    async def delete(path: str) -> None:
        async with sem:
            await http.req("DELETE", path, opts)

    for plural in ("pods", "services"):
        status, lst = await http.req("GET", f"/api/v1/namespaces/{ns}/{plural}")
        if status == 200:
            await asyncio.gather(
                *(
                    delete(f"/api/v1/namespaces/{ns}/{plural}/{item['metadata']['name']}")
                    for item in lst["items"]
                )
            )
    t_objects = time.monotonic() - t0
    await http.req("DELETE", f"/api/v1/namespaces/{ns}", opts)
    while time.monotonic() - t0 < limit_s:
        status, _ = await http.req("GET", f"/api/v1/namespaces/{ns}")
        if status == 404:
            say(
                f"namespace {ns} deleted in {time.monotonic() - t0:.1f}s "
                f"(pods and services {t_objects:.1f}s)"
            )
            return
        await asyncio.sleep(0.5)
    say(f"WARNING: namespace {ns} still terminating after {limit_s:.0f}s")


# --- audit log ----------------------------------------------------------------------


def audit_offset(env: Env) -> int:
    return env.audit.stat().st_size


def _read_from(path: Path, start: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read()


def _ts(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


async def audit_read(env: Env, http: Http, start: int) -> list[dict[str, Any]]:
    """Audit events from byte ``start`` up to a marker request sent now (batch mode
    writes asynchronously, so wait until the marker is on disk)."""
    marker = f"bench-marker-{uuid.uuid4().hex[:12]}"
    await http.req("GET", f"/api/v1/namespaces/{marker}")
    deadline = time.monotonic() + 60
    while True:
        data = await asyncio.to_thread(_read_from, env.audit, start)
        if marker.encode() in data:
            break
        if time.monotonic() > deadline:
            say("WARNING: audit marker not seen after 60s; counting what is there")
            break
        await asyncio.sleep(0.3)
    events: dict[str, dict[str, Any]] = {}
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            ev = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a partial last line
        aid = ev.get("auditID")
        if ev.get("stage") == "ResponseComplete" or aid not in events:
            events[aid] = ev
    say(f"audit log: {len(events)} requests ({len(data) / 2**20:.0f} MB) read")
    return list(events.values())


@dataclass
class Requests:
    by_verb: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # verb,res,code
    creates_t: list[float] = field(default_factory=list)  # completion times of 201 creates
    first_submit: float | None = None

    def count(self, verb: str, resource: str, code: str | None = None) -> int:
        return sum(
            n
            for (v, r, c), n in self.by_verb.items()
            if v == verb and r == resource and (code is None or c == code)
        )

    def total(self, verbs: tuple[str, ...], resources: tuple[str, ...]) -> int:
        return sum(n for (v, r, _c), n in self.by_verb.items() if v in verbs and r in resources)

    def creation_time(self, objects: int) -> float | None:
        """First TFJob submitted -> the objects-th successful create (server clock)."""
        if self.first_submit is None or len(self.creates_t) < objects:
            return None
        return self.creates_t[objects - 1] - self.first_submit


def summarize_audit(events: list[dict[str, Any]], ua: str, ns: str) -> Requests:
    out = Requests()
    for ev in events:
        ref = ev.get("objectRef") or {}
        agent = ev.get("userAgent") or ""
        if agent.startswith(HARNESS_UA) and not agent.startswith(FLOOR_UA):
            if (
                ev.get("verb") == "create"
                and ref.get("resource") == "tfjobs"
                and ref.get("namespace") == ns
            ):
                t = _ts(ev["requestReceivedTimestamp"])
                out.first_submit = t if out.first_submit is None else min(out.first_submit, t)
            continue
        if not agent.startswith(ua):
            continue
        if ref.get("namespace") not in (None, "", ns):
            continue
        resource = ref.get("resource", "?") + (
            "/" + ref["subresource"] if ref.get("subresource") else ""
        )
        code = str((ev.get("responseStatus") or {}).get("code", "?"))
        verb = ev.get("verb", "?")
        out.by_verb[(verb, resource, code)] += 1
        if verb == "create" and resource in ("pods", "services") and code == "201":
            out.creates_t.append(_ts(ev["stageTimestamp"]))
        if verb == "create" and resource == "tfjobs" and ua == FLOOR_UA:
            t = _ts(ev["requestReceivedTimestamp"])
            out.first_submit = t if out.first_submit is None else min(out.first_submit, t)
    out.creates_t.sort()
    return out


# --- the controller process ---------------------------------------------------------


class ControllerProc:
    def __init__(self, env: Env, mode: Mode, out: Path, profile: bool, threads: int) -> None:
        self.health = cluster_mod.free_port()
        self.log_path = out / f"controller-{mode.slug}.log"
        self.profile_session = out / "profile.pyisession" if profile else None
        flags = [
            f"--kubeconfig={env.kubeconfig}",
            f"--kube-api-qps={mode.qps:g}",
            f"--kube-api-burst={mode.burst}",
            f"--controller-threads={threads}",
            "--log-format=json",
            f"--metrics-bind-address=127.0.0.1:{cluster_mod.free_port()}",
            f"--health-probe-bind-address=127.0.0.1:{self.health}",
        ]
        py = REPO / ".venv" / "bin" / "python"
        python = str(py) if py.exists() else sys.executable
        if self.profile_session:
            argv = [
                python,
                "-m",
                "pyinstrument",
                "-r",
                "pyisession",
                "-o",
                str(self.profile_session),
                "-m",
                "tfjob_controller.app",
                *flags,
            ]
        else:
            argv = [python, "-m", "tfjob_controller.app", *flags]
        logf = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            argv,
            stdout=logf,
            stderr=subprocess.STDOUT,
            cwd=str(REPO),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        logf.close()
        self.ps = psutil.Process(self.proc.pid)
        self.peak_rss = 0
        self.rss_samples: list[tuple[float, int]] = []
        self.cpu = 0.0

    def sample(self) -> None:
        try:
            rss = self.ps.memory_info().rss
            t = self.ps.cpu_times()
        except psutil.Error:
            return
        self.peak_rss = max(self.peak_rss, rss)
        self.cpu = t.user + t.system
        self.rss_samples.append((time.monotonic(), rss))

    def vm_hwm(self) -> int:
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    async def wait_ready(self, limit_s: float = 60) -> None:
        deadline = time.monotonic() + limit_s
        async with aiohttp.ClientSession() as s:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"controller exited; see {self.log_path}")
                try:
                    async with s.get(
                        f"http://127.0.0.1:{self.health}/readyz",
                        timeout=aiohttp.ClientTimeout(total=1),
                    ) as r:
                        if r.status == 200:
                            return
                except (aiohttp.ClientError, TimeoutError):
                    pass
                await asyncio.sleep(0.2)
        raise RuntimeError("controller not ready")

    def stop(self) -> None:
        self.sample()
        self.peak_rss = max(self.peak_rss, self.vm_hwm())
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60 if self.profile_session else 20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --- phase results ------------------------------------------------------------------


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
    succeeded_lat: list[float] = field(default_factory=list)
    cpu_s: float | None = None
    peak_rss: int | None = None
    profiled: bool = False
    #: 1-minute load average at the end of the phase (the machine may be shared)
    load: float = field(default_factory=lambda: os.getloadavg()[0])

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


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))
    return s[k]


# --- phase 1: ours ------------------------------------------------------------------


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

    def latencies(self) -> tuple[list[float], list[float]]:
        running = []
        for t, job, rtype, n in self.pod_running:
            for t_obs, counts, _ in self.job_obs.get(job, []):
                if counts.get(rtype, 0) >= n:
                    running.append(max(0.0, t_obs - t))
                    break
        succeeded = [
            max(0.0, self.job_succeeded[j] - t)
            for j, t in self.master_succeeded.items()
            if j in self.job_succeeded
        ]
        return running, succeeded


async def run_ours(
    env: Env, args: argparse.Namespace, mode: Mode, out: Path, profile: bool
) -> PhaseResult:
    ns = f"bench-ours-{mode.slug}-{uuid.uuid4().hex[:5]}"
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

        offset = audit_offset(env)
        ctl = ControllerProc(env, mode, out, profile, args.controller_threads)
        await ctl.wait_ready()
        ctl.sample()
        say(
            f"[ours {mode.label}] controller ready (pid {ctl.proc.pid}"
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
        say(f"[ours {mode.label}] {n} TFJobs submitted in {time.monotonic() - t0:.1f}s")
        last = 0.0
        deadline = t0 + args.timeout
        t_created: float | None = None
        while True:
            ctl.sample()
            now = time.monotonic()
            created = len(tr.pods_added) + len(tr.services_added)
            if t_created is None and created >= 2 * n * m:
                t_created = now
            done = len(tr.job_succeeded)
            if now - last >= args.progress or done >= n:
                last = now
                say(
                    f"[ours {mode.label}] t={now - t0:5.1f}s pods {len(tr.pods_added)}/{n * m}"
                    f" services {len(tr.services_added)}/{n * m}"
                    f" running {len(tr.seen_running)} finishing {len(tr.finished_jobs)}"
                    f" succeeded {done}/{n} | controller cpu {ctl.cpu:.1f}s"
                    f" rss {ctl.peak_rss / 2**20:.0f}MB"
                )
            if done >= n:
                break
            if now > deadline:
                say(f"[ours {mode.label}] TIMEOUT after {args.timeout:.0f}s")
                break
            if ctl.proc.poll() is not None:
                say(
                    f"[ours {mode.label}] controller exited ({ctl.proc.returncode}); "
                    f"see {ctl.log_path}"
                )
                break
            await asyncio.sleep(0.25)
        wall = time.monotonic() - t0
        # Let trailing writes (a late status write, buffered events) land, then stop it.
        for _ in range(int(args.settle / 0.25)):
            ctl.sample()
            await asyncio.sleep(0.25)
        ctl.stop()
        say(
            f"[ours {mode.label}] controller stopped: cpu {ctl.cpu:.1f}s, "
            f"peak rss {ctl.peak_rss / 2**20:.0f}MB; reading the audit log"
        )
        events = await audit_read(env, harness, offset)
        reqs = summarize_audit(events, CONTROLLER_UA, ns)
        running_lat, succeeded_lat = tr.latencies()
        return PhaseResult.measured(
            "ours",
            mode.label,
            ns,
            reqs,
            2 * n * m,
            wall,
            jobs_succeeded=len(tr.job_succeeded),
            running_lat=running_lat,
            succeeded_lat=succeeded_lat,
            cpu_s=ctl.cpu,
            peak_rss=ctl.peak_rss,
            profiled=profile,
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


# --- phase 2: the floor -------------------------------------------------------------


async def run_floor(
    env: Env, args: argparse.Namespace, mode: Mode, cleanup: bool = True
) -> PhaseResult:
    ns = f"bench-floor-{mode.slug}-{uuid.uuid4().hex[:5]}"
    n, m = args.jobs, args.replicas
    harness = Http(env.base, env.ctx, HARNESS_UA, 100)
    # As wide as the controller's connection pool: its creates can't be more parallel.
    floor = Http(env.base, env.ctx, FLOOR_UA, args.floor_concurrency)
    try:
        await create_namespace(harness, ns)
        # The bodies, computed up front by the controller's own planner, with a
        # placeholder owner UID replaced by the real one once each TFJob exists.
        plans: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
        for name in job_names(n):
            body = tfjob_body(name, ns, m)
            cached = json.loads(json.dumps(body))
            cached["metadata"].update(
                uid=f"placeholder-{name}", generation=1, creationTimestamp="2026-01-01T00:00:00Z"
            )
            pods, svcs = planned_children(cached)
            plans[name] = (body, pods + svcs)
        sem = asyncio.Semaphore(args.floor_concurrency)
        submit_sem = asyncio.Semaphore(50)
        bucket = Bucket(mode.qps, mode.burst)
        done = Counter()

        async def create(obj: dict[str, Any]) -> None:
            plural = "pods" if obj["kind"] == "Pod" else "services"
            await bucket.take()
            async with sem:
                status, body = await floor.req("POST", f"/api/v1/namespaces/{ns}/{plural}", obj)
            done[status] += 1
            if status != 201:
                say(f"WARNING: floor create {plural}: {status} {str(body)[:200]}")

        async def one_job(name: str) -> None:
            body, children = plans[name]
            # Submitted like in phase 1: by the harness, on its own connections.
            async with submit_sem:
                status, job = await harness.req(
                    "POST", f"/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs", body
                )
            if status != 201:
                raise RuntimeError(f"floor submit {name}: {status} {job}")
            uid = job["metadata"]["uid"]
            for child in children:
                for ref in child["metadata"].get("ownerReferences") or []:
                    ref["uid"] = uid
            await asyncio.gather(*(create(c) for c in children))

        offset = audit_offset(env)
        say(
            f"[floor {mode.label}] bare client: concurrency {args.floor_concurrency}, "
            f"qps {mode.label}; {n} TFJobs and {2 * n * m} creates into {ns}"
        )
        t0 = time.monotonic()
        work = asyncio.ensure_future(asyncio.gather(*(one_job(j) for j in job_names(n))))
        last = t0
        while not work.done():
            await asyncio.wait({work}, timeout=args.progress)
            if time.monotonic() - last >= args.progress:
                last = time.monotonic()
                say(
                    f"[floor {mode.label}] t={last - t0:5.1f}s created "
                    f"{sum(done.values())}/{2 * n * m}"
                )
        work.result()
        wall = time.monotonic() - t0
        say(f"[floor {mode.label}] done in {wall:.1f}s; reading the audit log")
        events = await audit_read(env, harness, offset)
        reqs = summarize_audit(events, FLOOR_UA, ns)
        return PhaseResult.measured("floor", mode.label, ns, reqs, 2 * n * m, wall)
    finally:
        await floor.close()
        if cleanup:
            await delete_namespace(harness, ns)
        await harness.close()


# --- report -------------------------------------------------------------------------


def fmt(v: float | None, spec: str = ".1f", unit: str = "") -> str:
    return "n/a" if v is None else f"{v:{spec}}{unit}"


def ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 1000:.0f}"


def report(args: argparse.Namespace, runs: list[tuple[PhaseResult, PhaseResult]]) -> str:
    n, m = args.jobs, args.replicas
    minimum = 2 * n * m + 3 * n
    head = "| | " + " | ".join(f"QPS {o.mode}" for o, _ in runs) + " |"
    sep = "|---|" + "---|" * len(runs)
    rows: list[tuple[str, list[str]]] = []

    def row(label: str, f: Any) -> None:
        rows.append((label, [f(o, fl) for o, fl in runs]))

    row(
        "(a) submit → all pods+services created, ours (s)",
        lambda o, f: fmt(o.creation_s, ".2f") + (" (profiled)" if o.profiled else ""),
    )
    row("(e) same creates, bare client floor (s)", lambda o, f: fmt(f.creation_s, ".2f"))
    row(
        "(e) ours / floor",
        lambda o, f: fmt(
            o.creation_s / f.creation_s if o.creation_s and f.creation_s else None, ".2f"
        ),
    )
    row(
        "(b) pod Running → TFJob status, p50 / p99 (ms)",
        lambda o, f: (
            f"{ms(pct(o.running_lat, 50))} / {ms(pct(o.running_lat, 99))} (n={len(o.running_lat)})"
        ),
    )
    row(
        "(b) chief Succeeded → TFJob Succeeded, p50 / p99 (ms)",
        lambda o, f: (
            f"{ms(pct(o.succeeded_lat, 50))} / {ms(pct(o.succeeded_lat, 99))}"
            f" (n={len(o.succeeded_lat)})"
        ),
    )
    row("jobs Succeeded", lambda o, f: f"{o.jobs_succeeded}/{n}")
    row(
        "(c) pod creates: 201 / 409 duplicate / other",
        lambda o, f: _codes(o.requests, "create", "pods"),
    )
    row(
        "(c) service creates: 201 / 409 duplicate / other",
        lambda o, f: _codes(o.requests, "create", "services"),
    )
    row(
        "(c) TFJob status writes (total, per job)",
        lambda o, f: f"{_status_writes(o.requests)} ({_status_writes(o.requests) / n:.2f})",
    )
    row("(c) other writes on pods/services/tfjobs", lambda o, f: str(_other_writes(o.requests)))
    row(
        f"(c) workload writes / minimum ({minimum} = 2·N·M + 3·N)",
        lambda o, f: (
            f"{_workload_writes(o.requests)} / {minimum} = "
            f"{_workload_writes(o.requests) / minimum:.2f}"
        ),
    )
    row(
        "(c) event writes (create / patch)",
        lambda o, f: (
            f"{o.requests.count('create', 'events')} / {o.requests.count('patch', 'events')}"
        ),
    )
    row(
        "(c) reads (list / watch / get)",
        lambda o, f: (
            f"{o.requests.total(('list',), _ALL)} / "
            f"{o.requests.total(('watch',), _ALL)} / {o.requests.total(('get',), _ALL)}"
        ),
    )
    row("(d) controller CPU (s)", lambda o, f: fmt(o.cpu_s, ".1f"))
    row(
        "(d) controller peak RSS (MB)",
        lambda o, f: fmt(o.peak_rss / 2**20 if o.peak_rss else None, ".0f"),
    )
    row("phase wall time, ours / floor (s)", lambda o, f: f"{o.wall_s:.1f} / {f.wall_s:.1f}")
    row(
        f"1-min load average at phase end, ours / floor ({os.cpu_count()} CPUs)",
        lambda o, f: f"{o.load:.1f} / {f.load:.1f}",
    )
    lines = [
        f"### tfjob-controller vs floor: {n} TFJobs x {m} replicas "
        f"({n * m} pods, {n * m} services), {args.controller_threads} controller threads, "
        f"floor concurrency {args.floor_concurrency}",
        "",
        head,
        sep,
        *[f"| {label} | " + " | ".join(vals) + " |" for label, vals in rows],
        "",
        "Requests by verb and resource (controller, from the audit log):",
        "",
    ]
    for o, _f in runs:
        detail = ", ".join(
            f"{v} {r} {c}: {k}" for (v, r, c), k in sorted(o.requests.by_verb.items())
        )
        lines.append(f"- QPS {o.mode}: {detail}")
    return "\n".join(lines) + "\n"


_ALL = ("pods", "services", "tfjobs", "tfjobs/status", "events", "leases", "namespaces")


def _codes(r: Requests, verb: str, res: str) -> str:
    ok, dup = r.count(verb, res, "201"), r.count(verb, res, "409")
    other = r.count(verb, res) - ok - dup
    return f"{ok} / {dup} / {other}"


def _status_writes(r: Requests) -> int:
    return r.total(("update", "patch"), ("tfjobs/status",))


def _other_writes(r: Requests) -> int:
    return r.total(
        ("update", "patch", "delete", "deletecollection"), ("pods", "services", "tfjobs")
    )


def _workload_writes(r: Requests) -> int:
    return (
        r.count("create", "pods")
        + r.count("create", "services")
        + _status_writes(r)
        + _other_writes(r)
    )


def plot(path: Path, runs: list[tuple[PhaseResult, PhaseResult]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 4.2), squeeze=False)
    for ax, (ours, floor) in zip(axes[0], runs, strict=True):
        for res, style in ((ours, "-"), (floor, "--")):
            if res.requests.first_submit is None or not res.requests.creates_t:
                continue
            xs = [t - res.requests.first_submit for t in res.requests.creates_t]
            ys = list(range(1, len(xs) + 1))
            label = "tfjob-controller" if res.name == "ours" else "floor (bare client)"
            ax.plot([0.0, *xs], [0, *ys], style, label=label)
        ax.set_title(f"QPS {ours.mode}")
        ax.set_xlabel("seconds since first TFJob submitted")
        ax.set_ylabel("pods + services created")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_profile(out: Path) -> None:
    session = out / "profile.pyisession"
    if not session.exists():
        say("WARNING: no profile session was written")
        return
    py = REPO / ".venv" / "bin" / "python"
    python = str(py) if py.exists() else sys.executable
    for renderer, name, extra in (
        ("html", "profile.html", []),
        ("text", "profile.txt", ["--no-color", "--unicode"]),
    ):
        subprocess.run(
            [
                python,
                "-m",
                "pyinstrument",
                f"--load={session}",
                "-r",
                renderer,
                "-o",
                str(out / name),
                *extra,
            ],
            check=False,
        )
    say(f"profile written to {out / 'profile.html'} and {out / 'profile.txt'}")


# --- main ---------------------------------------------------------------------------


async def bench(
    args: argparse.Namespace, env: Env, out: Path
) -> list[tuple[PhaseResult, PhaseResult]]:
    runs = []
    for i, mode in enumerate(args.qps):
        ours = await run_ours(env, args, mode, out, profile=args.profile and i == 0)
        # The last namespace goes with the cluster, unless the cluster stays.
        last = i == len(args.qps) - 1
        floor = await run_floor(env, args, mode, cleanup=args.keep_cluster or not last)
        runs.append((ours, floor))
        say(
            f"mode {mode.label}: ours {fmt(ours.creation_s, '.2f')}s, "
            f"floor {fmt(floor.creation_s, '.2f')}s"
        )
    return runs


def main(argv: list[str] | None = None) -> int:
    from controller.api import ClientSettings

    p = argparse.ArgumentParser(prog="hack/bench", description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=200, help="TFJobs (default 200)")
    p.add_argument(
        "--replicas",
        type=int,
        default=8,
        help="replicas per job: 1 Chief + M-1 Workers (default 8)",
    )
    p.add_argument(
        "--qps",
        type=parse_modes,
        default=parse_modes("unlimited,20/30"),
        help="comma-separated client QPS modes, e.g. unlimited,20/30 (default)",
    )
    p.add_argument("--controller-threads", type=int, default=4)
    p.add_argument(
        "--floor-concurrency",
        type=int,
        default=ClientSettings().pool_size,
        help="the floor's semaphore (default: the controller's connection pool)",
    )
    p.add_argument(
        "--profile", action="store_true", help="run the first controller phase under pyinstrument"
    )
    p.add_argument("--keep-cluster", action="store_true", help="leave the bench cluster up")
    p.add_argument("--out", default=str(REPO / "bench-out"))
    p.add_argument("--timeout", type=float, default=420, help="per controller phase (s)")
    p.add_argument(
        "--settle",
        type=float,
        default=1.0,
        help="seconds the controller keeps running after the last job succeeded",
    )
    p.add_argument("--progress", type=float, default=3.0, help="progress line interval (s)")
    p.add_argument("--nodes", type=int, default=20)
    p.add_argument("--node-pods", type=int, default=200)
    args = p.parse_args(argv)
    if args.jobs < 1 or args.replicas < 1:
        p.error("--jobs and --replicas must be >= 1")
    os.environ.setdefault("TFJOB_CLUSTER_DIR", str(REPO / ".cluster-bench"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = cluster_up(args, args.jobs * args.replicas)
    try:
        runs = asyncio.run(bench(args, env, out))
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    finally:
        if not args.keep_cluster:
            say("stopping the bench cluster (--keep-cluster leaves it up)")
            cluster_down()
    if args.profile:
        render_profile(out)
    table = report(args, runs)
    (out / "results.md").write_text(table)
    raw = [
        {
            phase.name: {
                "mode": phase.mode,
                "creation_s": phase.creation_s,
                "wall_s": phase.wall_s,
                "jobs_succeeded": phase.jobs_succeeded,
                "running_latency_s": {
                    "p50": pct(phase.running_lat, 50),
                    "p99": pct(phase.running_lat, 99),
                },
                "succeeded_latency_s": {
                    "p50": pct(phase.succeeded_lat, 50),
                    "p99": pct(phase.succeeded_lat, 99),
                },
                "cpu_s": phase.cpu_s,
                "peak_rss_bytes": phase.peak_rss,
                "requests": {
                    f"{v} {r} {c}": k for (v, r, c), k in sorted(phase.requests.by_verb.items())
                },
            }
            for phase in pair
        }
        for pair in runs
    ]
    (out / "results.json").write_text(
        json.dumps({"jobs": args.jobs, "replicas": args.replicas, "runs": raw}, indent=2)
    )
    plot(out / "created-over-time.png", runs)
    print()
    print(table)
    say(f"wrote {out / 'results.md'}, {out / 'results.json'}, {out / 'created-over-time.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
