#!/usr/bin/env python3
"""Benchmark: informer list+decode throughput and memory per cached pod.

    .venv/bin/python hack/bench_informer.py [--pods 10000] [--page-size 500]
        [--kubeconfig PATH --namespace NS]

By default the pods come from a local HTTP server that answers the pods LIST with
realistic, pre-encoded pod JSON (managedFields included) in pages, so the numbers
measure our stack (aiohttp → orjson → transform → store) and not the apiserver, and
the shared cluster is not loaded with 10,000 pods. With --kubeconfig the informer lists
the pods of --namespace on a real cluster instead.

Each mode (transform off / on) runs in a fresh subprocess so the RSS figures do not
share a heap. Reported per mode: wall time of the initial list, pods/s, MB/s of JSON,
and RSS growth per cached pod.
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
sys.path.insert(0, str(REPO))


def make_pod(i: int) -> dict[str, Any]:
    name = f"bench-job-worker-{i}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": f"00000000-0000-4000-8000-{i:012d}",
            "resourceVersion": str(1000 + i),
            "creationTimestamp": "2024-01-01T00:00:00Z",
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
                    "time": "2024-01-01T00:00:00Z",
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
                {"type": t, "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [
                {
                    "name": "tensorflow",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}},
                    "image": "tensorflow/tensorflow:2.15.0",
                    "imageID": "",
                }
            ],
        },
    }


async def serve_pods(count: int) -> tuple[Any, int, int]:
    """A local server answering GET /api/v1/pods with limit/continue pagination."""
    import orjson
    from aiohttp import web

    encoded = [orjson.dumps(make_pod(i)) for i in range(count)]
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


def rss_bytes() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


async def run_mode(args: argparse.Namespace) -> dict[str, Any]:
    """One measurement, in this process: list into an Informer's store, once."""
    from kubernetes_asyncio.client.configuration import Configuration

    from controller.api import ClientSettings, KubeApi, load_configuration
    from controller.informer import Informer, strip_managed_fields
    from controller.kube import PODS, ResourceClient

    runner = None
    total_bytes = 0
    namespace = None
    if args.kubeconfig:
        cfg = await load_configuration(args.kubeconfig)
        namespace = args.namespace
    else:
        runner, port, total_bytes = await serve_pods(args.pods)
        cfg = Configuration(host=f"http://127.0.0.1:{port}")
    settings = ClientSettings(qps=0, request_timeout=300)
    transform = strip_managed_fields if args.mode == "transform" else None
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
            transform=transform,
            page_size=args.page_size,
        )
        gc.collect()
        rss_before = rss_bytes()
        started = time.perf_counter()
        await informer._list_and_replace()  # the initial sync, without the watch
        elapsed = time.perf_counter() - started
        gc.collect()
        rss_after = rss_bytes()
        cached = len(informer.store)
    if runner is not None:
        await runner.cleanup()
    return {
        "mode": args.mode,
        "pods": cached,
        "seconds": round(elapsed, 3),
        "pods_per_second": round(cached / elapsed, 1) if elapsed else None,
        "mb_per_second": round(total_bytes / elapsed / 1e6, 1) if total_bytes and elapsed else None,
        "json_bytes_per_pod": round(total_bytes / cached) if total_bytes and cached else None,
        "rss_bytes_per_pod": round((rss_after - rss_before) / cached) if cached else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--pods", type=int, default=10_000)
    p.add_argument("--page-size", type=int, default=500)
    p.add_argument("--kubeconfig", default=None, help="list a real cluster instead")
    p.add_argument("--namespace", default=None)
    p.add_argument("--mode", choices=("plain", "transform"), default=None, help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.mode:
        import anyio

        print(json.dumps(anyio.run(run_mode, args)), flush=True)
        return

    results = []
    for mode in ("plain", "transform"):
        print(f"running mode={mode} pods={args.pods} page_size={args.page_size}", file=sys.stderr)
        cmd = [
            sys.executable,
            __file__,
            f"--mode={mode}",
            f"--pods={args.pods}",
            f"--page-size={args.page_size}",
        ]
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
        "pods_per_second",
        "mb_per_second",
        "json_bytes_per_pod",
        "rss_bytes_per_pod",
    ]
    print("  ".join(f"{c:>18}" for c in cols))
    for r in results:
        print("  ".join(f"{r[c]!s:>18}" for c in cols))


if __name__ == "__main__":
    main()
