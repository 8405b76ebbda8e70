"""The progress-endpoint flood (`make bench-flood`): can an anonymous client on the pod
network starve reporters, run the process out of descriptors, or get a job failed as
stalled?

On a cluster of its own (kwok runs the pods), one tfjob-controller process started as a
container often is (soft descriptor limit 1,024, the hard one the machine's), progress
on at its defaults (128 connections per source address). For each ``--held`` count
(0 first, as the baseline):

1. an attacker without any credential holds that many connections to the progress port
   from ``--sources`` loopback addresses (127.0.1.x, ...), a third each sending nothing,
   idle after a TLS handshake, and asking ``POST /nothing`` over TLS; each one closed is
   opened again at once; plus ``--bare`` bare connects from one more address;
2. once they are up, a new TFJob of ``--workers`` workers with a 10 s progress deadline
   and ``stall-action: fail`` starts; its pods (tokens bound to them by TokenRequest)
   report every ``--interval`` s for ``--duration`` s, each over a kept-alive
   connection;
3. meanwhile ``/healthz`` is asked once a second, and the controller's open descriptors
   and RSS are sampled.

Last, with nothing held, ``--junk-senders`` loops send requests a stranger can make up
(random bearer values, JWT-shaped tokens with made-up claims, the real pods' names with
made-up UIDs, made-up job names) for ``--duration`` s while the job reports: what that
costs the apiserver is the TokenReviews the controller made meanwhile.

It prints, per count: each pod's time to its first accepted report, the reports' answers
and latency, the probes that failed, the job's end state (never Failed, never restarted,
Stalled never True), the descriptors and RSS at their peak, and the connections the
endpoint closed to make room. The figures and the command go to docs/benchmarks.md by
hand; nothing here asserts them.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import resource
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

import hack.cluster as cluster_mod
from hack.bench_progress import Pod, cluster_for, mint_tokens, percentile, post_report
from hack.benchmark.client import Http
from hack.benchmark.environment import create_namespace
from hack.benchmark.sampling import byte_compile
from hack.run_local import progress_flags

REPO = cluster_mod.REPO
UA = "tfjob-bench-flood"
#: a container's usual soft limit (what the issue measured against)
SOFT_NOFILE = 1024
#: the kwok pods' addresses: on loopback, so each simulated pod sends from its own
POD_CIDR = "127.44.0.0/16"


def say(msg: str) -> None:
    print(f"[bench-flood {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def pod_ips(pods: list[dict[str, Any]]) -> dict[str, str]:
    return {p["metadata"]["name"]: (p.get("status") or {}).get("podIP", "") for p in pods}


@dataclass
class Attack:
    """The attacker's side: how many of its connections are open now, and what
    happened to them."""

    open: int = 0
    opened: int = 0
    closed: Counter[str] = field(default_factory=Counter)


@dataclass
class Phase:
    held: int
    junk: int = 0  # made-up requests answered
    reviews: dict[str, float] = field(default_factory=dict)  # verdicts by result, added
    first: list[float] = field(default_factory=list)  # each pod: seconds to its first 204
    codes: Counter[int] = field(default_factory=Counter)
    answers: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    probes: Counter[str] = field(default_factory=Counter)
    fds: int = 0
    rss_mb: float = 0.0
    attacker_open: int = 0
    outcome: str = ""


async def hold(
    kind: str,
    src: str,
    host: str,
    port: int,
    ctx: ssl.SSLContext,
    attack: Attack,
    stop: asyncio.Event,
) -> None:
    """One of the attacker's connections, opened again whenever it is closed."""
    while not stop.is_set():
        writer = None
        try:
            tls = ctx if kind != "bare" else None
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=tls, local_addr=(src, 0)), 30
            )
            attack.open += 1
            attack.opened += 1
            try:
                if kind == "404":
                    writer.write(b"POST /nothing HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
                # held until the server closes it
                while await reader.read(4096):
                    pass
                attack.closed["by the server"] += 1
            finally:
                attack.open -= 1
        except (TimeoutError, OSError, ssl.SSLError) as e:
            attack.closed[type(e).__name__] += 1
            await asyncio.sleep(0.2)  # refused, reset: not a hot loop
        finally:
            if writer is not None:
                writer.close()


async def report(
    p: Pod, ns: str, src: str, host: str, port: int, ctx: ssl.SSLContext,
    args: argparse.Namespace, until: float, phase: Phase, started: float,
) -> None:  # fmt: skip
    """A pod reporting every ``--interval`` s from its own address ``src``, as the
    helper does: one kept-alive TLS connection, opened again when closed or refused;
    latency counted from the send."""
    interval = args.interval
    path = f"/v1/namespaces/{ns}/tfjobs/{p.job}/progress"
    reader = writer = None
    got_first = False
    due = time.monotonic()
    while due < until:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        due += interval
        try:
            t0 = time.monotonic()
            if writer is None:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port, ssl=ctx, local_addr=(src, 0)),
                    interval * 5,
                )
            p.step += 10
            body = orjson.dumps({"step": p.step, "totalSteps": 100_000})
            assert reader is not None and writer is not None
            code, close = await post_report(
                reader, writer, host, path, p.token, body, wait=interval * 5
            )
            phase.codes[code] += 1
            phase.answers.append(time.monotonic() - t0)
            if code == 204 and not got_first:
                got_first = True
                phase.first.append(time.monotonic() - started)
            if close:
                writer.close()
                writer = None
        except (TimeoutError, OSError, ValueError, IndexError, asyncio.IncompleteReadError) as e:
            phase.errors[type(e).__name__] += 1
            if writer is not None:
                writer.close()
            writer = None
    if writer is not None:
        writer.close()


async def probe_loop(url: str, phase: Phase, stop: asyncio.Event) -> None:
    """``/healthz`` once a second, as a kubelet would (1 s time-out)."""

    def ask() -> str:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                return "ok" if r.status == 200 else f"status {r.status}"
        except Exception as e:  # a failed probe, whatever the cause
            return type(e).__name__

    while not stop.is_set():
        t0 = time.monotonic()
        phase.probes[await asyncio.to_thread(ask)] += 1
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))


def fds_and_rss(pid: int) -> tuple[int, float]:
    """The process's open descriptors and its RSS in MB."""
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return fds, int(line.split()[1]) / 1024
    return fds, 0.0


async def sample_loop(pid: int, phase: Phase, stop: asyncio.Event) -> None:
    while not stop.is_set():
        with contextlib.suppress(OSError):
            fds, rss = fds_and_rss(pid)
            phase.fds, phase.rss_mb = max(phase.fds, fds), max(phase.rss_mb, rss)
        await asyncio.sleep(1.0)


def job_body(name: str, workers: int) -> dict[str, Any]:
    tpl = {"spec": {"containers": [{"name": "tensorflow", "image": "bench:flood"}]}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {
            "name": name,
            "annotations": {
                "training.kubeflow.org/progress-deadline-seconds": "10",
                "training.kubeflow.org/stall-action": "fail",
            },
        },
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": workers, "template": tpl}}},
    }


async def running_pods(
    http: Http, ns: str, job: str, want: int
) -> tuple[list[Pod], dict[str, str]]:
    """The job's pods once ``want`` run, and each one's address."""
    deadline = time.monotonic() + 120
    while True:
        _, out = await http.req(
            "GET",
            f"/api/v1/namespaces/{ns}/pods",
            params={"labelSelector": f"training.kubeflow.org/job-name={job}"},
        )
        pods = [
            p for p in out.get("items", []) if (p.get("status") or {}).get("phase") == "Running"
        ]
        if len(pods) >= want and all(p["status"].get("podIP") for p in pods):
            ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods}
            return [
                Pod(
                    job,
                    p["metadata"]["name"],
                    p["metadata"]["uid"],
                    int(p["metadata"]["labels"]["training.kubeflow.org/replica-index"]),
                )
                for p in pods
            ], ips
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(pods)} of {want} pods of {job} running")
        await asyncio.sleep(0.5)


def outcome(job: dict[str, Any]) -> str:
    status = job.get("status") or {}
    conds = {c["type"]: c for c in status.get("conditions") or []}
    failed = conds.get("Failed", {})
    stalled = conds.get("Stalled", {})
    restarts = sum(
        (rs.get("restarts") or 0) for rs in (status.get("replicaStatuses") or {}).values()
    )
    parts = [
        "Failed " + str(failed.get("reason")) if failed.get("status") == "True" else "not failed",
        f"Stalled {stalled.get('status', 'unset')} ({stalled.get('reason', '-')})",
        f"restarts {restarts}",
    ]
    return ", ".join(parts)


def verdicts(port: int) -> dict[str, float]:
    """The controller's token verdicts so far, by result."""
    prefix = 'tfjob_progress_reports_token_reviews_total{result="'
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return {
            line[len(prefix) :].split('"', 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in r.read().decode().splitlines()
            if line.startswith(prefix)
        }


def made_up_token(claims: dict[str, Any]) -> str:
    def part(doc: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(orjson.dumps(doc)).rstrip(b"=").decode()

    sig = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
    return f"{part({'alg': 'RS256', 'kid': 'x'})}.{part(claims)}.{sig}"


async def junk(
    ns: str, host: str, port: int, ctx: ssl.SSLContext, pods: list[Pod], phase: Phase,
    stop: asyncio.Event,
) -> None:  # fmt: skip
    """A stranger's requests, one per connection (each is answered and closed): what it
    can make up without any credential."""
    n = 0
    while not stop.is_set():
        n += 1
        victim = pods[n % len(pods)]
        job_path = f"/v1/namespaces/{ns}/tfjobs/{victim.job}/progress"
        aud = f"tfjob.kubeflow.org/{ns}/{victim.job}"
        exp = int(time.time()) + 3600
        kind = n % 4
        if kind == 0:
            path, token = job_path, uuid.uuid4().hex * 8
        elif kind == 1:
            claims: dict[str, Any] = {"aud": [aud], "exp": exp, "sub": uuid.uuid4().hex}
            path, token = job_path, made_up_token(claims)
        elif kind == 2:  # the real pod's name, a UID made up
            pod = {"name": victim.name, "uid": str(uuid.uuid4())}
            claims = {"aud": [aud], "exp": exp, "kubernetes.io": {"namespace": ns, "pod": pod}}
            path, token = job_path, made_up_token(claims)
        else:
            made = f"job-{uuid.uuid4().hex[:10]}"
            path = f"/v1/namespaces/{ns}/tfjobs/{made}/progress"
            token = made_up_token({"aud": [f"tfjob.kubeflow.org/{ns}/{made}"], "exp": exp})
        writer = None
        try:
            reader, writer = await asyncio.open_connection(host, port, ssl=ctx)
            body = b'{"step": 1}'
            head = (
                f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await reader.read(4096)
            phase.junk += 1
        except (OSError, ssl.SSLError) as e:
            phase.errors[f"(junk) {type(e).__name__}"] += 1
            await asyncio.sleep(0.1)
        finally:
            if writer is not None:
                writer.close()


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


async def start_attacker(
    args: argparse.Namespace, port: int, held: int, junk_for: list[Pod], ns: str
) -> asyncio.subprocess.Process:
    """The attacker, in a process of its own: in this one its thousands of connections
    would slow the simulated pods' own sends, and their figures would be this driver's."""
    argv = [
        sys.executable, "-m", "hack.bench_flood", "--attacker", f"--port={port}",
        f"--ca={args.ca}", f"--held={max(held, 0)}", f"--bare={args.bare if held > 0 else 0}",
        f"--sources={args.sources}", "--kinds", *args.kinds,
    ]  # fmt: skip
    if junk_for:
        argv += [f"--junk-senders={args.junk_senders}", f"--ns={ns}", "--victims"]
        argv += [f"{p.job}/{p.name}" for p in junk_for]
    return await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)


async def stop_attacker(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    proc.send_signal(signal.SIGTERM)
    out, _ = await proc.communicate()
    try:
        return dict(orjson.loads(out.strip().splitlines()[-1]))
    except (IndexError, orjson.JSONDecodeError):
        return {"error": f"the attacker exited {proc.returncode} with {out[-200:]!r}"}


async def attacker_main(args: argparse.Namespace) -> int:
    """``--attacker``: hold, connect and make up requests until SIGTERM, then print what
    happened as one JSON line."""
    raise_own_limit(args.held + args.bare + 4096)
    ctx = ssl.create_default_context(cafile=args.ca)
    host, port = "127.0.0.1", args.port
    attack = Attack()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    tasks = []
    kinds = args.kinds
    for i in range(args.held):
        src = f"127.0.{1 + (i % args.sources) // 250}.{2 + (i % args.sources) % 250}"
        tasks.append(
            asyncio.create_task(hold(kinds[i % len(kinds)], src, host, port, ctx, attack, stop))
        )
    for _ in range(args.bare):
        tasks.append(asyncio.create_task(hold("bare", "127.0.9.9", host, port, ctx, attack, stop)))
    victims = [Pod(v.split("/")[0], v.split("/")[1], "", 0) for v in args.victims]
    junk_phase = Phase(-1)
    for _ in range(args.junk_senders if victims else 0):
        tasks.append(asyncio.create_task(junk(args.ns, host, port, ctx, victims, junk_phase, stop)))
    peak = 0
    while not stop.is_set():
        peak = max(peak, attack.open)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    report = {
        "opened": attack.opened,
        "open_peak": peak,
        "closed": dict(attack.closed),
        "junk": junk_phase.junk,
        "junk_errors": dict(junk_phase.errors),
    }
    print(orjson.dumps(report).decode(), flush=True)
    return 0


async def phase_of(
    args: argparse.Namespace, http: Http, ns: str, held: int, url: str, ctx: ssl.SSLContext,
    pid: int, health: str, metrics_port: int,
) -> Phase:  # fmt: skip
    # the endpoint listens on every address; loopback lets the attacker pick its source
    host, port = "127.0.0.1", int(url.rsplit(":", 1)[1])
    phase = Phase(held)
    stop = asyncio.Event()
    watchers = [
        asyncio.create_task(probe_loop(health, phase, stop)),
        asyncio.create_task(sample_loop(pid, phase, stop)),
    ]
    evicted0 = metric(metrics_port, "tfjob_progress_reports_connections_evicted_total")
    reviews0 = verdicts(metrics_port)
    attacker = None
    seen: dict[str, Any] = {}
    try:
        if held > 0:
            attacker = await start_attacker(args, port, held, [], ns)
            await asyncio.sleep(args.settle)
            say(f"{held} held (+{args.bare} bare) for {args.settle:g} s")
        name = f"f{held}" if held >= 0 else "fjunk"
        status, body = await http.req(
            "POST", f"/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs", job_body(name, args.workers)
        )
        if status != 201:
            raise RuntimeError(f"create {name}: {status} {body}")
        pods, ips = await running_pods(http, ns, name, args.workers)
        await mint_tokens(http, ns, pods)
        if held < 0:
            attacker = await start_attacker(args, port, held, pods, ns)
        started = time.monotonic()
        until = started + args.duration
        await asyncio.gather(
            *(
                report(p, ns, ips[p.name], host, port, ctx, args, until, phase, started)
                for p in pods
            )
        )
        _, job = await http.req("GET", f"/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs/{name}")
        phase.outcome = outcome(job)
    finally:
        if attacker is not None:
            seen = await stop_attacker(attacker)
        stop.set()
        for t in watchers:
            t.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
    evicted = metric(metrics_port, "tfjob_progress_reports_connections_evicted_total") - evicted0
    phase.reviews = {
        r: n - reviews0.get(r, 0.0)
        for r, n in verdicts(metrics_port).items()
        if n != reviews0.get(r)
    }
    phase.junk = int(seen.get("junk", 0))
    phase.attacker_open = int(seen.get("open_peak", 0))
    phase.errors["(endpoint) evicted to make room"] = int(evicted)
    phase.errors["(attacker) connections opened"] = int(seen.get("opened", 0))
    if "error" in seen:
        phase.errors[seen["error"]] = 1
    return phase


def print_phase(ph: Phase, workers: int, duration: float) -> None:
    reports = sum(ph.codes.values())
    ans = sorted(ph.answers)
    first = sorted(ph.first)
    print(f"  held {ph.held}:" if ph.held >= 0 else "  made-up tokens and job names:")
    if ph.held < 0:
        made = sum(n for r, n in ph.reviews.items() if r in ("accepted", "refused", "error"))
        print(
            f"    {ph.junk} made-up requests answered ({ph.junk / duration:.0f}/s);"
            f" TokenReviews sent {made:.0f} ({made / duration:.1f}/s); verdicts {ph.reviews}"
        )
    print(
        f"    first accepted report: {len(first)}/{workers} pods"
        + (f", slowest {first[-1]:.2f} s, median {percentile(first, 50):.2f} s" if first else "")
    )
    if ans:
        print(
            f"    reports: {reports}: {dict(ph.codes)}; answer p50 {percentile(ans, 50) * 1000:.1f}"
            f" ms, p99 {percentile(ans, 99) * 1000:.1f} ms, max {ans[-1]:.2f} s"
        )
    print(f"    errors: {dict(ph.errors)}")
    print(f"    /healthz: {dict(ph.probes)}")
    print(f"    job: {ph.outcome}")
    print(
        f"    controller peak: {ph.fds} descriptors, RSS {ph.rss_mb:.0f} MB;"
        f" attacker's open connections at peak {ph.attacker_open}"
    )


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return bool(r.status == 200)
    except Exception:  # not up yet
        return False


def raise_own_limit(want: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), max(hard, want)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run(args: argparse.Namespace) -> int:
    raise_own_limit(max(args.held) + args.bare + 4096)
    # the pods get loopback addresses, so a simulated pod can send from its own, as a
    # real one does (the endpoint knows our pods' addresses)
    pods = args.workers * (len(args.held) + 2)
    d = cluster_for(".cluster-bench-flood", pods, 110, say, f"--kwok-cidr={POD_CIDR}")
    flags = progress_flags(d / "pki")
    metrics_port = cluster_mod.free_port()
    probe_port = cluster_mod.free_port()
    byte_compile()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    argv = [
        str(REPO / ".venv" / "bin" / "tfjob-controller"),
        f"--kubeconfig={d / 'kubeconfig'}",
        "--log-format=json",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
        "--metrics-secure=false",
        f"--health-probe-bind-address=127.0.0.1:{probe_port}",
        *flags,
    ]
    say(f"controller: soft descriptor limit {SOFT_NOFILE}, hard {hard}")
    with open(d / "logs" / "bench-flood-controller.log", "wb") as logf:
        ctrl = subprocess.Popen(
            argv,
            stdout=logf,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT_NOFILE, hard)),
        )
    try:
        url = next(f for f in flags if f.startswith("--progress-url=")).split("=", 1)[1]
        return asyncio.run(measure(args, d, ctrl.pid, url, metrics_port, probe_port))
    finally:
        ctrl.terminate()
        try:
            ctrl.wait(30)
        except subprocess.TimeoutExpired:
            ctrl.kill()
        if not args.keep_cluster:
            subprocess.run(cluster_mod.command("down"), cwd=REPO, check=False)


async def measure(
    args: argparse.Namespace, d: Path, pid: int, url: str, metrics_port: int, probe_port: int
) -> int:
    state = cluster_mod.load_state(d)
    assert state is not None
    admin = ssl.create_default_context(cafile=str(d / "pki" / "ca.crt"))
    admin.load_cert_chain(str(d / "pki" / "admin.crt"), str(d / "pki" / "admin.key"))
    http = Http(f"https://127.0.0.1:{state['ports']['apiserver']}", admin, UA, 20)
    ctx = ssl.create_default_context(cafile=str(d / "pki" / "ca.crt"))
    args.ca = str(d / "pki" / "ca.crt")
    health = f"http://127.0.0.1:{probe_port}/healthz"
    deadline = time.monotonic() + 60
    while not await asyncio.to_thread(healthy, health):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{health} never answered")
        await asyncio.sleep(0.5)
    ns = f"bench-flood-{uuid.uuid4().hex[:6]}"
    phases = []
    try:
        await create_namespace(http, ns)
        for held in [0, *args.held, -1]:
            say(f"phase: {held} anonymous connections held" if held >= 0 else "phase: made up")
            phases.append(await phase_of(args, http, ns, held, url, ctx, pid, health, metrics_port))
            print_phase(phases[-1], args.workers, args.duration)
        say("results:")
        for ph in phases:
            print_phase(ph, args.workers, args.duration)
        return 0
    finally:
        await http.req("DELETE", f"/api/v1/namespaces/{ns}")
        await http.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m hack.bench_flood", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--held", type=int, nargs="+", default=[4096, 20000])
    p.add_argument("--bare", type=int, default=1100, help="bare connects from one address")
    p.add_argument("--sources", type=int, default=160, help="the attacker's addresses")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--interval", type=float, default=2.0, help="seconds between reports")
    p.add_argument("--duration", type=float, default=40.0, help="seconds the job reports")
    p.add_argument("--settle", type=float, default=15.0, help="seconds the flood builds up")
    p.add_argument(
        "--kinds",
        nargs="+",
        choices=("bare", "idle", "404"),
        default=["bare", "idle", "404"],
        help="what the held connections do, in turn: send nothing, idle after TLS, ask /nothing",
    )
    p.add_argument("--junk-senders", type=int, default=32, help="made-up requests' loops")
    p.add_argument("--keep-cluster", action="store_true")
    # the attacker's own process (start_attacker)
    p.add_argument("--attacker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--ca", help=argparse.SUPPRESS)
    p.add_argument("--ns", help=argparse.SUPPRESS)
    p.add_argument("--victims", nargs="*", default=[], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.attacker:
        args.held = args.held[0]
        return asyncio.run(attacker_main(args))
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
