"""A restart at size: how long a new controller takes to act, with many jobs' pods about.

On a cluster of its own (kwok runs the pods):

1. tfjob-controller (``--leader-elect``) runs ``--jobs`` TFJobs of ``--replicas``
   workers until every pod is Running;
2. it is SIGKILLed, a probe TFJob is created (nothing can act on it yet), and a new
   process is started: the same command, as a Deployment's replacement pod would be;
3. the harness notes, on one clock: the process's start, its caches synced (its log,
   with each informer's list time), the Lease acquired (its log; the dead holder's
   lease must run out first), and the first pod of the probe job, seen by a watch the
   harness opened before (a poll of 40,000 pods every 50 ms would load the apiserver
   the new leader needs): the new leader's first write;
4. a cold start: that process is stopped cleanly (it releases the Lease), a second
   probe is created and a new process started with no lease to wait for;
5. with ``--compare upstream``, the same restart for the upstream TFJob controller
   (hack/upstream-operator, which has no leader election), twice: its start to the
   probe's first pod.

It prints each span and what each cache listed; and checks after each of ours that it
created nothing twice (the pod count is the jobs' plus the probes'). Figures go to
docs/benchmarks.md by hand.

    python -m hack.bench_failover --jobs 200 --replicas 8 [--compare upstream]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson

import hack.cluster as cluster_mod
from hack.bench_progress import cluster_for, job_body, start_jobs
from hack.benchmark.client import Http, watch
from hack.benchmark.environment import create_namespace, list_names
from hack.benchmark.sampling import byte_compile

REPO = cluster_mod.REPO
UA = "tfjob-bench-failover"
OPERATOR = "training.kubeflow.org/operator-name=tfjob-controller"


def say(msg: str) -> None:
    print(f"[bench-failover {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def ours_argv(d: Path, qps: float) -> list[str]:
    return [
        str(REPO / ".venv" / "bin" / "tfjob-controller"),
        f"--kubeconfig={d / 'kubeconfig'}",
        "--log-format=json",
        "--leader-elect",
        "--leader-election-namespace=default",
        "--metrics-bind-address=0",
        "--health-probe-bind-address=127.0.0.1:0",
        f"--kube-api-qps={qps}",
    ]


def ours(d: Path, log: Path, qps: float) -> subprocess.Popen[bytes]:
    byte_compile()
    with open(log, "ab") as out:
        return subprocess.Popen(
            ours_argv(d, qps),
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def upstream(binary: Path, d: Path, log: Path, qps: float) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [
                str(binary),
                f"--kubeconfig={d / 'kubeconfig'}",
                "--metrics-bind-address=0",
                "--health-probe-bind-address=127.0.0.1:0",
                f"--kube-api-qps={qps}",
                "--controller-threads=4",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def log_events(log: Path, since: int) -> dict[str, Any]:
    """When ours synced its caches and acquired the Lease (wall seconds), and what each
    informer listed and how long its list took, from its JSON log after byte ``since``."""
    out: dict[str, Any] = {"listed": {}, "list_seconds": {}}
    with open(log, "rb") as f:
        f.seek(since)
        for line in f:
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            event, ts = rec.get("event"), rec.get("timestamp")
            when = dt.datetime.fromisoformat(ts).timestamp() if ts else None
            if event == "cache synced":
                out["listed"][rec.get("informer")] = rec.get("count")
                out["list_seconds"][rec.get("informer")] = rec.get("list_seconds")
            elif event == "caches synced":
                out.setdefault("synced", when)
            elif event == "leader acquired":
                out.setdefault("acquired", when)
    return out


async def watch_first_pod(http: Http, ns: str, job: str) -> tuple[asyncio.Task[float], Any]:
    """A watch on ``job``'s pods, synced before it returns: the task's result is the wall
    time its first pod was seen; cancel the second to end the watch."""
    seen: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    def on_event(typ: str, obj: dict[str, Any], t: float) -> None:
        if typ == "ADDED" and not seen.done():
            seen.set_result(time.time())

    synced = asyncio.Event()
    watching = asyncio.ensure_future(
        watch(
            http,
            f"/api/v1/namespaces/{ns}/pods",
            on_event,
            synced,
            f"{OPERATOR},training.kubeflow.org/job-name={job}",
        )
    )
    await asyncio.wait_for(synced.wait(), 120)
    return asyncio.ensure_future(seen), watching


async def pod_count(http: Http, ns: str) -> int:
    """Our pods in ``ns``, listed a page at a time."""
    return len(await list_names(http, f"/api/v1/namespaces/{ns}/pods"))


async def restart(
    http: Http, ns: str, probe: str, replicas: int, start: Any, limit: float
) -> tuple[float, float, subprocess.Popen[bytes]]:
    """Create the probe job, start the controller; (start wall time, first-pod wall time)."""
    first, watching = await watch_first_pod(http, ns, probe)
    try:
        status, body = await http.req(
            "POST", f"/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs", job_body(probe, replicas)
        )
        if status != 201:
            raise RuntimeError(f"create {probe}: {status} {body}")
        began = time.time()
        proc = start()
        try:
            seen = await asyncio.wait_for(first, limit)
        except TimeoutError:
            raise RuntimeError(f"no pod of {probe} within {limit:g} s") from None
        return began, seen, proc
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    proc.send_signal(sig)
    proc.wait(60)


def report_ours(tag: str, ev: dict[str, Any], began: float, seen: float) -> None:
    synced, acquired = ev.get("synced"), ev.get("acquired")
    lists = ", ".join(
        f"{name} {count} in {ev['list_seconds'].get(name)} s"
        for name, count in ev["listed"].items()
    )
    say(f"{tag}: listed {lists}")
    say(f"{tag}: start -> caches synced {synced - began:.2f} s" if synced else "no sync seen")
    if acquired:
        say(f"{tag}: start -> lease acquired {acquired - began:.2f} s")
        say(f"{tag}: lease acquired -> the probe's first pod {seen - acquired:.2f} s")
    say(f"{tag}: start -> the probe's first pod {seen - began:.2f} s")


async def nothing_twice(http: Http, ns: str, want: int) -> bool:
    """Whether the pods are the jobs' and the probes' (after a moment for a stray
    second create to land)."""
    await asyncio.sleep(2)
    have = await pod_count(http, ns)
    say(f"pods {have} (want {want}): {'nothing created twice' if have == want else 'MISMATCH'}")
    return have == want


async def measure(args: argparse.Namespace, d: Path) -> int:
    state = cluster_mod.load_state(d)
    assert state is not None
    api = cluster_mod.Api(d, state["ports"]["apiserver"])
    http = Http(api.base, api.ctx, UA, 64)
    logs = d / "logs"
    ns = f"failover-{os.getpid()}"
    try:
        await create_namespace(http, ns)
        log = logs / "bench-failover-ours.log"
        first = ours(d, log, args.qps)
        say(f"{args.jobs} jobs x {args.replicas} workers, ours running them")
        await start_jobs(http, ns, args.jobs, args.replicas)
        stop(first)
        since = log.stat().st_size
        say("ours SIGKILLed; a probe job created; a new process started")
        began, seen, second = await restart(
            http, ns, "probe-ours", args.replicas, lambda: ours(d, log, args.qps), args.limit
        )
        report_ours("ours after a SIGKILL", log_events(log, since), began, seen)
        ok = await nothing_twice(http, ns, (args.jobs + 1) * args.replicas)
        stop(second, signal.SIGTERM)  # releases the Lease
        since = log.stat().st_size
        say("ours stopped cleanly; a probe job created; a new process started (cold)")
        began, seen, third = await restart(
            http, ns, "probe-ours-cold", args.replicas, lambda: ours(d, log, args.qps), args.limit
        )
        report_ours("ours from cold", log_events(log, since), began, seen)
        ok = await nothing_twice(http, ns, (args.jobs + 2) * args.replicas) and ok
        stop(third, signal.SIGTERM)
        if args.compare == "upstream":
            from hack.benchmark.upstream import build_upstream

            binary = build_upstream()
            ulog = logs / "bench-failover-upstream.log"
            say("upstream started on the same jobs (its first start lists them all)")
            b0, s0, up = await restart(
                http, ns, "probe-up-1", args.replicas,
                lambda: upstream(binary, d, ulog, args.qps), args.limit,
            )  # fmt: skip
            stop(up)
            b1, s1, up = await restart(
                http, ns, "probe-up-2", args.replicas,
                lambda: upstream(binary, d, ulog, args.qps), args.limit,
            )  # fmt: skip
            stop(up, signal.SIGTERM)
            say(f"upstream: start -> the probe's first pod {s0 - b0:.2f} s, then {s1 - b1:.2f} s")
        return 0 if ok else 1
    finally:
        await http.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--replicas", type=int, default=8)
    p.add_argument("--qps", type=float, default=0, help="client QPS (<= 0: unlimited)")
    p.add_argument("--node-pods", type=int, default=2000, help="pods per kwok node")
    p.add_argument("--limit", type=float, default=300, help="seconds to wait for a probe pod")
    p.add_argument("--compare", choices=["upstream"], default=None)
    p.add_argument("--keep-cluster", action="store_true")
    args = p.parse_args(argv)
    # the jobs, and the probes of the restarts (two of ours, two of upstream's)
    pods = (args.jobs + 4) * args.replicas
    d = cluster_for(".cluster-bench-failover", pods, args.node_pods, say)
    try:
        import uvloop

        return uvloop.run(measure(args, d))
    finally:
        if not args.keep_cluster:
            subprocess.run(cluster_mod.command("down"), cwd=REPO, check=False)


if __name__ == "__main__":
    raise SystemExit(main())
