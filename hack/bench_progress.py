"""The training-progress benchmark (`make bench-progress`): what reports cost the controller.

On the local cluster (kwok runs the pods), with one tfjob-controller process serving the
progress endpoint at its defaults (5 s status pace, 1 report/s per pod, burst 5):

1. ``--jobs`` TFJobs of ``--replicas`` workers are created and run;
2. one token per pod is minted the way the kubelet asks for a projected one
   (TokenRequest bound to the pod, with the job's audience);
3. the controller's CPU is measured for ``--idle`` seconds with nothing reporting;
4. every pod reports every ``--interval`` seconds for ``--duration`` seconds, each over
   one kept-alive TLS connection, its step going up by 10 a report;
5. a watch on the TFJobs notes when each report's step is first shown in the job's
   ``trainingProgress.replicas`` (report -> visible latency), and counts the jobs' status
   writes.

It prints the controller's added CPU (cores: reporting minus idle), the latency
percentiles, the writes per job per minute, the answers by status code and the
TokenReviews the controller made. The figures and the command go to
docs/benchmarks.md by hand; nothing here asserts them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import ssl
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

import hack.cluster as cluster_mod
from hack.benchmark.client import Http, watch
from hack.benchmark.environment import create_namespace
from hack.benchmark.sampling import byte_compile
from hack.run_local import progress_flags

REPO = cluster_mod.REPO
UA = "tfjob-bench-progress"


def say(msg: str) -> None:
    print(f"[bench-progress {time.strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclass
class Pod:
    job: str
    name: str
    uid: str
    index: int
    token: str = ""
    step: int = 0
    sent: dict[int, float] = field(default_factory=dict)  # step -> monotonic send time


@dataclass
class Tally:
    codes: Counter[int] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    writes: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    answers: list[float] = field(default_factory=list)  # seconds to each answer


def job_body(name: str, replicas: int) -> dict[str, Any]:
    tpl = {"spec": {"containers": [{"name": "tensorflow", "image": "bench:progress"}]}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": replicas, "template": tpl}}},
    }


async def start_jobs(http: Http, ns: str, jobs: int, replicas: int) -> list[Pod]:
    base = f"/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs"
    sem = asyncio.Semaphore(20)
    # 40,000 pods take kwok and the scheduler many minutes to run. A watch of the
    # running ones counts them: a list of every pod every few seconds took a tenth of
    # the apiserver's CPU at 5,000 jobs, and slowed the very start-up it waited for.
    running_now: dict[str, dict[str, Any]] = {}

    def seen(typ: str, pod: dict[str, Any], _t: float) -> None:
        if typ == "DELETED":
            running_now.pop(pod["metadata"]["name"], None)
        elif typ in ("ADDED", "MODIFIED"):
            running_now[pod["metadata"]["name"]] = pod

    synced = asyncio.Event()
    counting = asyncio.create_task(
        watch(
            http,
            f"/api/v1/namespaces/{ns}/pods",
            seen,
            synced,
            selector="training.kubeflow.org/operator-name=tfjob-controller",
            fields="status.phase=Running",
        )
    )
    await synced.wait()

    async def create(i: int) -> None:
        async with sem:
            status, body = await http.req("POST", base, job_body(f"p{i:04d}", replicas))
            if status != 201:
                raise RuntimeError(f"create job {i}: {status} {body}")

    try:
        await asyncio.gather(*(create(i) for i in range(jobs)))
        want = jobs * replicas
        deadline = time.monotonic() + max(600, want / 10)
        while len(running_now) < want:
            if counting.done():
                counting.result()  # raises the watch's error
                raise RuntimeError("the watch of running pods ended")
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(running_now)} of {want} pods running")
            say(f"{len(running_now)}/{want} pods running")
            await asyncio.sleep(3.0)
    finally:
        counting.cancel()
        await asyncio.gather(counting, return_exceptions=True)
    running = list(running_now.values())
    pods = []
    for p in running:
        labels = p["metadata"]["labels"]
        pods.append(
            Pod(
                labels["training.kubeflow.org/job-name"],
                p["metadata"]["name"],
                p["metadata"]["uid"],
                int(labels["training.kubeflow.org/replica-index"]),
            )
        )
    return pods


async def mint_tokens(http: Http, ns: str, pods: list[Pod]) -> None:
    sem = asyncio.Semaphore(20)

    async def mint(p: Pod) -> None:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [f"tfjob.kubeflow.org/{ns}/{p.job}"],
                "expirationSeconds": 3600,
                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": p.name, "uid": p.uid},
            },
        }
        async with sem:
            status, out = await http.req(
                "POST", f"/api/v1/namespaces/{ns}/serviceaccounts/default/token", body
            )
        if status != 201:
            raise RuntimeError(f"token for {p.name}: {status} {out}")
        p.token = out["status"]["token"]

    await asyncio.gather(*(mint(p) for p in pods))


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def post_report(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    host: str,
    path: str,
    token: str,
    body: bytes,
    wait: float | None = None,
) -> tuple[int, bool]:
    """One report over a kept-alive connection: its answer's status, and whether the
    server closes the connection after it (the answer's body read and dropped); ``wait``
    bounds the wait for the answer's first line."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    status_line = await asyncio.wait_for(reader.readline(), wait)
    code = int(status_line.split()[1])
    length, close = 0, False
    while (line := await reader.readline()) not in (b"\r\n", b""):
        k, _, v = line.decode().partition(":")
        if k.lower() == "content-length":
            length = int(v)
        elif k.lower() == "connection" and v.strip().lower() == "close":
            close = True
    if length:
        await reader.readexactly(length)
    return code, close


async def report_loop(
    p: Pod, ns: str, url: str, ctx: ssl.SSLContext, interval: float, until: float, tally: Tally
) -> None:
    host, port = url.removeprefix("https://").rsplit(":", 1)
    path = f"/v1/namespaces/{ns}/tfjobs/{p.job}/progress"
    # on a fixed schedule from a random phase: a slow answer does not slow the rate
    due = time.monotonic() + random.uniform(0, interval)
    reader = writer = None
    while due < until:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        due += interval
        if due < time.monotonic():
            # this driver fell behind (its CPU): skip the reports it missed rather than
            # send them back to back, which the per-pod limit would answer with 429
            tally.errors["behind"] += 1
            due = time.monotonic() + interval
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(host, int(port), ssl=ctx)
            p.step += 10
            body = orjson.dumps(
                {"step": p.step, "totalSteps": 100_000, "metrics": {"loss": 1.0 / p.step}}
            )
            sent_at = time.monotonic()
            assert reader is not None
            code, close = await post_report(reader, writer, host, path, p.token, body)
            tally.codes[code] += 1
            tally.answers.append(time.monotonic() - sent_at)
            if code == 204:  # only a report the controller took can be shown
                p.sent[p.step] = sent_at
            if close:
                writer.close()
                writer = None
        except (OSError, ValueError, IndexError, asyncio.IncompleteReadError) as e:
            tally.errors[type(e).__name__] += 1
            if writer is not None:
                writer.close()
            writer = None
    if writer is not None:
        writer.close()


async def watch_jobs(
    http: Http, ns: str, pods: dict[tuple[str, int], Pod], tally: Tally, stop: asyncio.Event
) -> None:
    _, lst = await http.req("GET", f"/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs")
    rv = lst["metadata"]["resourceVersion"]
    shown: dict[tuple[str, int], int] = {}
    while not stop.is_set():
        path = f"/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs"
        params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "30"}
        async with http.session.get(http.base + path, params=params, timeout=None) as r:
            async for raw in r.content:
                if stop.is_set():
                    return
                ev = orjson.loads(raw)
                obj = ev["object"]
                rv = obj["metadata"].get("resourceVersion", rv)
                if ev["type"] != "MODIFIED":
                    continue
                now = time.monotonic()
                name = obj["metadata"]["name"]
                tally.writes[name] += 1
                tp = (obj.get("status") or {}).get("trainingProgress") or {}
                for rtype in (tp.get("replicas") or {}).values():
                    for rep in rtype.get("replicas") or []:
                        key = (name, rep["index"])
                        pod = pods.get(key)
                        before = shown.get(key, 0)
                        if pod is None or rep["step"] <= before:
                            continue
                        shown[key] = rep["step"]
                        for step in range(before + 10, rep["step"] + 1, 10):
                            sent = pod.sent.pop(step, None)
                            if sent is not None:
                                tally.latencies.append(now - sent)


def cluster_for(
    name: str, pods: int, node_pods: int, say: Callable[[str], None], *more: str
) -> Path:
    """A cluster of its own (in REPO/``name`` unless TFJOB_CLUSTER_DIR says otherwise)
    with kwok nodes for ``pods`` and a quarter more, up, with ``more`` options of
    hack/cluster.sh up; its directory."""
    os.environ.setdefault("TFJOB_CLUSTER_DIR", str(REPO / name))
    d = cluster_mod.cluster_dir()
    nodes = max(1, -(-pods * 5 // 4 // node_pods))
    say(f"cluster in {d}: {nodes} kwok nodes x {node_pods} pods")
    subprocess.run(
        cluster_mod.command("up", f"--nodes={nodes}", f"--node-pods={node_pods}", *more),
        cwd=REPO,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return d


def controller_argv(
    d: Path, metrics_port: int, qps: float, burst: int, progress: list[str]
) -> list[str]:
    """The controller under measure: plain /metrics (the benchmark scrapes it), the
    client limits asked for, the progress endpoint with ``progress``'s flags."""
    return [
        str(REPO / ".venv" / "bin" / "tfjob-controller"),
        f"--kubeconfig={d / 'kubeconfig'}",
        "--log-format=json",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
        "--metrics-secure=false",
        f"--kube-api-qps={qps}",
        f"--kube-api-burst={burst}",
        "--health-probe-bind-address=127.0.0.1:0",
        # every simulated pod connects from this host, an address no pod has: no
        # per-address share, no strangers' budget
        "--progress-max-connections-per-source=0",
        "--progress-stranger-connections=0",
        *progress,
    ]


def run(args: argparse.Namespace) -> int:
    d = cluster_for(".cluster-bench-progress", args.jobs * args.replicas, args.node_pods, say)
    flags = progress_flags(d / "pki")
    metrics_port = cluster_mod.free_port()
    byte_compile()
    with open(d / "logs" / "bench-progress-controller.log", "wb") as logf:
        ctrl = subprocess.Popen(
            controller_argv(d, metrics_port, args.qps, args.burst, flags),
            stdout=logf,
            stderr=subprocess.STDOUT,
        )
    try:
        url = next(f for f in flags if f.startswith("--progress-url=")).split("=", 1)[1]
        import uvloop

        return uvloop.run(measure(args, d, ctrl.pid, url, metrics_port))
    finally:
        ctrl.terminate()
        try:
            ctrl.wait(30)
        except subprocess.TimeoutExpired:
            ctrl.kill()
        if not args.keep_cluster:
            subprocess.run(cluster_mod.command("down"), cwd=REPO, check=False)


async def measure(args: argparse.Namespace, d: Path, pid: int, url: str, metrics_port: int) -> int:
    state = cluster_mod.load_state(d)
    assert state is not None
    ctx = ssl.create_default_context(cafile=str(d / "pki" / "ca.crt"))
    ctx.load_cert_chain(str(d / "pki" / "admin.crt"), str(d / "pki" / "admin.key"))
    http = Http(f"https://127.0.0.1:{state['ports']['apiserver']}", ctx, UA, 50)
    ns = f"bench-progress-{uuid.uuid4().hex[:6]}"
    try:
        await create_namespace(http, ns)
        say(f"{args.jobs} jobs x {args.replicas} workers in {ns}; controller at {args.qps:g} QPS")
        pods = await start_jobs(http, ns, args.jobs, args.replicas)
        await mint_tokens(http, ns, pods)
        say(f"{len(pods)} tokens minted; controller idle for {args.idle:g} s")
        await asyncio.sleep(10)  # the pods' Running written, the jobs settled
        c0, t0 = cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(args.idle)
        idle = (cpu_seconds(pid) - c0) / (time.monotonic() - t0)
        say(f"idle: {idle:.3f} cores; {len(pods)} pods report every {args.interval:g} s")
        client_ctx = ssl.create_default_context(cafile=str(d / "pki" / "ca.crt"))
        tally = Tally()
        stop = asyncio.Event()
        by_key = {(p.job, p.index): p for p in pods}
        watcher = asyncio.create_task(watch_jobs(http, ns, by_key, tally, stop))
        until = time.monotonic() + args.warmup + args.duration
        loops = [
            asyncio.create_task(report_loop(p, ns, url, client_ctx, args.interval, until, tally))
            for p in pods
        ]
        await asyncio.sleep(args.warmup)  # connections made, tokens reviewed once
        tally.latencies.clear()
        tally.answers.clear()
        tally.writes.clear()
        codes_before = Counter(tally.codes)
        c1, t1 = cpu_seconds(pid), time.monotonic()
        me1 = cpu_seconds(os.getpid())
        await asyncio.gather(*loops)
        busy = (cpu_seconds(pid) - c1) / (time.monotonic() - t1)
        driver = (cpu_seconds(os.getpid()) - me1) / (time.monotonic() - t1)
        load = os.getloadavg()[0]
        await asyncio.sleep(args.interval + 2)  # the last reports' writes
        stop.set()
        watcher.cancel()
        minutes = (time.monotonic() - t1) / 60
        codes = tally.codes - codes_before
        reports = sum(codes.values())
        lat = sorted(tally.latencies)
        say("results:")
        print(f"  reports answered: {reports} ({reports / (minutes * 60):.0f}/s): {dict(codes)}")
        print(f"  client errors: {dict(tally.errors)}")
        ans = sorted(tally.answers)
        if ans:
            print(
                f"  answer time: p50 {percentile(ans, 50) * 1000:.1f} ms,"
                f" p99 {percentile(ans, 99) * 1000:.1f} ms, max {ans[-1]:.2f} s"
            )
        print(f"  this driver's CPU: {driver:.3f} cores; machine load (1 min): {load:.2f}")
        print(f"  controller CPU: idle {idle:.3f}, reporting {busy:.3f} cores")
        print(f"  controller CPU added by the reports: {busy - idle:.3f} cores")
        if lat:
            print(
                f"  report -> visible in status: p50 {percentile(lat, 50):.2f} s,"
                f" p90 {percentile(lat, 90):.2f} s, p99 {percentile(lat, 99):.2f} s,"
                f" max {lat[-1]:.2f} s ({len(lat)} reports seen)"
            )
        writes = sum(tally.writes.values())
        print(f"  status writes: {writes / args.jobs / minutes:.1f} per job per minute")
        print(f"  token reviews: {controller_metrics(metrics_port)}")
        print(f"  event loop lag: {loop_lag(metrics_port)}")
        return 0
    finally:
        await http.req("DELETE", f"/api/v1/namespaces/{ns}")
        await http.close()


def controller_metrics(port: int) -> str:
    """The controller's TokenReview counts (hit: a cached verdict)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        out = r.read().decode()
    return ", ".join(
        line.split("{", 1)[1].replace("}", "")
        for line in out.splitlines()
        if line.startswith("tfjob_progress_reports_token_reviews_total{")
    )


def loop_lag(port: int) -> str:
    """The controller's event_loop_lag_seconds: how many samples, and how many over 0.1 s
    and 1 s (a report waits for the loop as long)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        out = r.read().decode()
    buckets = {}
    for line in out.splitlines():
        if line.startswith("event_loop_lag_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets[le] = float(line.rsplit(" ", 1)[1])
    total = buckets.get("+Inf", 0.0)
    over = {le: total - n for le, n in buckets.items() if le in ("0.1", "1.0")}
    tenth, second = over.get("0.1", 0), over.get("1.0", 0)
    return f"{total:.0f} samples, over 0.1 s: {tenth:.0f}, over 1 s: {second:.0f}"


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile of sorted ``values`` (nearest rank)."""
    rank = max(0, min(len(values) - 1, round(q / 100 * len(values) + 0.5) - 1))
    return values[rank]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m hack.bench_progress", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--replicas", type=int, default=8)
    p.add_argument("--interval", type=float, default=5.0, help="seconds between a pod's reports")
    p.add_argument("--duration", type=float, default=120.0, help="seconds measured")
    p.add_argument("--warmup", type=float, default=15.0, help="seconds of reports before")
    p.add_argument("--idle", type=float, default=30.0, help="seconds the idle CPU is measured")
    p.add_argument("--node-pods", type=int, default=110)
    p.add_argument("--qps", type=float, default=20.0, help="the controller's --kube-api-qps")
    p.add_argument("--burst", type=int, default=30, help="the controller's --kube-api-burst")
    p.add_argument("--keep-cluster", action="store_true")
    args = p.parse_args(argv)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
