#!/usr/bin/env python3
"""Benchmark: informer list+decode throughput and memory per cached pod.

    .venv/bin/python -m hack.bench_informer [--pods 10000] [--page-size 500]
        [--modes off,strip,slim] [--inprocess-server] [--distinct-times]
        [--kubeconfig PATH --namespace NS]

By default the pods come from a local HTTP server that answers the pods LIST with
realistic, pre-encoded pod JSON (managedFields included) in pages, so the numbers
measure our stack (aiohttp → orjson → transform → store) and not the apiserver, and
the shared cluster is not loaded with 10,000 pods. The server runs in its own process,
so the measured process's CPU time is the client's alone (``--inprocess-server`` puts
it back on the client's event loop, as the first version of this script did). With
--kubeconfig the informer lists the pods of --namespace on a real cluster instead.

Modes (each in a fresh subprocess, so the RSS figures do not share a heap), all with
the pod informer's production indexers (``tfjob_controller.app.CHILD_INDEXERS``):
- ``off``: no transform, full pods cached;
- ``strip``: managedFields dropped (``strip_managed_fields``);
- ``slim``: the production pod transform (``tfjob_controller.app.POD_TRANSFORM``: managedFields
  dropped and the pod slimmed to what the reconciler reads, ``reconcile.sync.slim``).

Reported per mode: wall time of the initial list, pods/s by wall clock and per CPU
second of the measured process (the "per core" figure: other load on the machine
inflates wall time, not CPU time), MB/s of JSON, and RSS growth per cached pod (this
includes the store's keys and index, and the allocator's high-water mark of decoding
one page of full pods, a constant that is amortised over --pods).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def stamp(seconds: int) -> str:
    """An RFC 3339 timestamp ``seconds`` after 2024-01-01T00:00:00Z."""
    import datetime as dt

    at = dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=seconds)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def make_pod(i: int, distinct_times: bool = False) -> dict[str, Any]:
    """Pod ``i`` of job ``i // 8``. All timestamps are equal by default (pods created
    and started together); ``distinct_times`` gives every pod its own creation second
    and every condition and container start its own second after that, the worst case
    for the slim cache's sharing of identical conditions and states."""
    name = f"bench-job-worker-{i}"
    t0 = i * 10 if distinct_times else 0
    step = 1 if distinct_times else 0
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": f"00000000-0000-4000-8000-{i:012d}",
            "resourceVersion": str(1000 + i),
            "creationTimestamp": stamp(t0),
            "labels": {
                "training.kubeflow.org/job-name": f"bench-job-{i // 8}",
                "training.kubeflow.org/operator-name": "tfjob-controller",
                "training.kubeflow.org/replica-type": "worker",
                "training.kubeflow.org/replica-index": str(i % 8),
            },
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "TFJob",
                    "name": f"bench-job-{i // 8}",
                    "uid": f"10000000-0000-4000-8000-{i // 8:012d}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": m,
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": stamp(t0),
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:labels": {f"f:l{k}": {} for k in range(6)}},
                        "f:spec": {
                            "f:containers": {
                                'k:{"name":"tensorflow"}': {f"f:field{k}": {} for k in range(12)}
                            }
                        },
                    },
                }
                for m in ("tfjob-controller", "kube-scheduler", "kubelet")
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "tensorflow",
                    "image": "tensorflow/tensorflow:2.15.0",
                    "command": ["python", "/opt/train.py", "--epochs=10"],
                    "env": [
                        {
                            "name": "TF_CONFIG",
                            "value": json.dumps(
                                {
                                    "cluster": {
                                        "worker": [
                                            f"bench-job-worker-{k}.bench.svc:2222" for k in range(8)
                                        ]
                                    },
                                    "task": {"type": "worker", "index": i % 8},
                                }
                            ),
                        },
                    ],
                    "ports": [{"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"}],
                    "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Never",
            "nodeName": f"node-{i % 50}",
            "schedulerName": "default-scheduler",
        },
        "status": {
            "phase": "Running",
            "podIP": f"10.0.{i // 250}.{i % 250}",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": stamp(t0 + k * step)}
                for k, t in enumerate(("Initialized", "Ready", "ContainersReady", "PodScheduled"))
            ],
            "containerStatuses": [
                {
                    "name": "tensorflow",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": stamp(t0 + 5 * step)}},
                    "image": "tensorflow/tensorflow:2.15.0",
                    "imageID": "",
                }
            ],
        },
    }


async def serve_pods(count: int, distinct_times: bool = False) -> tuple[Any, int, int]:
    """A local server answering GET /api/v1/pods with limit/continue pagination."""
    import orjson
    from aiohttp import web

    encoded = [orjson.dumps(make_pod(i, distinct_times)) for i in range(count)]
    total_bytes = sum(len(e) for e in encoded)

    async def list_pods(request: web.Request) -> web.Response:
        limit = int(request.query.get("limit") or 0) or count
        start = int(request.query.get("continue") or 0)
        end = min(start + limit, count)
        meta: dict[str, Any] = {"resourceVersion": str(1000 + count)}
        if end < count:
            meta["continue"] = str(end)
        body = (
            b'{"kind":"PodList","apiVersion":"v1","metadata":'
            + orjson.dumps(meta)
            + b',"items":['
            + b",".join(encoded[start:end])
            + b"]}"
        )
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/v1/pods", list_pods)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = int(runner.addresses[0][1])
    return runner, port, total_bytes


def _server_process(count: int, distinct_times: bool, conn: Any) -> None:
    """Child process: serve the pods until the parent closes the pipe."""
    import asyncio

    async def serve() -> None:
        runner, port, total_bytes = await serve_pods(count, distinct_times)
        conn.send((port, total_bytes))
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        loop.add_reader(conn.fileno(), lambda: done.done() or done.set_result(None))
        await done  # EOF or any message: stop
        await runner.cleanup()

    asyncio.run(serve())


def start_server_process(count: int, distinct_times: bool) -> tuple[Any, Any, int, int]:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_server_process, args=(count, distinct_times, child), daemon=True)
    proc.start()
    child.close()
    port, total_bytes = parent.recv()
    return proc, parent, port, total_bytes


def rss_bytes() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def transform_for(mode: str) -> Any:
    from controller.cache.informer import strip_managed_fields
    from tfjob_controller.app import POD_TRANSFORM

    return {"off": None, "strip": strip_managed_fields, "slim": POD_TRANSFORM}[mode]


async def run_mode(args: argparse.Namespace) -> dict[str, Any]:
    """One measurement, in this process: list into an Informer's store, once."""
    from kubernetes_asyncio.client.configuration import Configuration

    from controller.cache.informer import Informer
    from controller.client.api import ClientSettings, KubeApi, load_configuration
    from controller.client.kube import PODS, ResourceClient
    from tfjob_controller.app import CHILD_INDEXERS

    runner = proc = pipe = None
    total_bytes = 0
    namespace = None
    if args.kubeconfig:
        cfg = await load_configuration(args.kubeconfig)
        namespace = args.namespace
    else:
        if args.inprocess_server:
            runner, port, total_bytes = await serve_pods(args.pods, args.distinct_times)
        else:
            proc, pipe, port, total_bytes = start_server_process(args.pods, args.distinct_times)
        cfg = Configuration(host=f"http://127.0.0.1:{port}")
    settings = ClientSettings(qps=0, request_timeout=300)
    async with KubeApi(cfg, settings) as api:
        client = ResourceClient(api, PODS)

        class Progress:
            """Wraps list_page to report progress per page."""

            def __init__(self) -> None:
                self.seen = 0

            async def list_page(self, *a: Any, **kw: Any) -> Any:
                page = await client.list_page(*a, **kw)
                self.seen += len(page.items)
                print(f"  [{args.mode}] listed {self.seen} pods", file=sys.stderr, flush=True)
                return page

            def watch(self, *a: Any, **kw: Any) -> Any:
                return client.watch(*a, **kw)

        progress = Progress()
        informer = Informer(
            progress,
            name="bench",
            namespace=namespace,
            transform=transform_for(args.mode),
            indexers=CHILD_INDEXERS,
            page_size=args.page_size,
        )
        gc.collect()
        rss_before = rss_bytes()
        started, cpu_started = time.perf_counter(), time.process_time()
        await informer._list_and_replace()  # the initial sync, without the watch
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        gc.collect()
        rss_after = rss_bytes()
        cached = len(informer.store)
    if runner is not None:
        await runner.cleanup()
    if proc is not None:
        pipe.close()
        proc.join(10)
    return {
        "mode": args.mode,
        "pods": cached,
        "seconds": round(elapsed, 3),
        "cpu_seconds": round(cpu, 3),
        "pods_per_second": round(cached / elapsed) if elapsed else None,
        "pods_per_cpu_second": round(cached / cpu) if cpu else None,
        "mb_per_second": round(total_bytes / elapsed / 1e6, 1) if total_bytes and elapsed else None,
        "json_bytes_per_pod": round(total_bytes / cached) if total_bytes and cached else None,
        "rss_bytes_per_pod": round((rss_after - rss_before) / cached) if cached else None,
    }


MODES = ("off", "strip", "slim")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--pods", type=int, default=10_000)
    p.add_argument("--page-size", type=int, default=500)
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of modes")
    p.add_argument(
        "--inprocess-server",
        action="store_true",
        help="serve the pods from the measured process's own event loop",
    )
    p.add_argument(
        "--distinct-times",
        action="store_true",
        help="give every pod its own timestamps (worst case for the slim cache's sharing)",
    )
    p.add_argument("--kubeconfig", default=None, help="list a real cluster instead")
    p.add_argument("--namespace", default=None)
    p.add_argument("--mode", choices=MODES, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.mode:
        import anyio

        print(json.dumps(anyio.run(run_mode, args)), flush=True)
        return

    results = []
    for mode in args.modes.split(","):
        if mode not in MODES:
            p.error(f"unknown mode {mode!r} (modes: {', '.join(MODES)})")
        print(f"running mode={mode} pods={args.pods} page_size={args.page_size}", file=sys.stderr)
        cmd = [
            sys.executable,
            __file__,
            f"--mode={mode}",
            f"--pods={args.pods}",
            f"--page-size={args.page_size}",
        ]
        if args.inprocess_server:
            cmd.append("--inprocess-server")
        if args.distinct_times:
            cmd.append("--distinct-times")
        if args.kubeconfig:
            cmd += [f"--kubeconfig={args.kubeconfig}"]
            if args.namespace:
                cmd += [f"--namespace={args.namespace}"]
        out = subprocess.run(
            cmd,
            check=True,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))

    cols = [
        "mode",
        "pods",
        "seconds",
        "cpu_seconds",
        "pods_per_second",
        "pods_per_cpu_second",
        "mb_per_second",
        "json_bytes_per_pod",
        "rss_bytes_per_pod",
    ]
    width = max(len(c) for c in cols)
    print("  ".join(f"{c:>{width}}" for c in cols))
    for r in results:
        print("  ".join(f"{r[c]!s:>{width}}" for c in cols))


if __name__ == "__main__":
    main()
