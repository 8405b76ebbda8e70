"""Phase 2, the floor: a bare client POSTs exactly the pods and services the controller
would, with no controller running."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections import Counter
from typing import Any

from hack.benchmark.audit import audit_offset, audit_read, summarize_audit
from hack.benchmark.client import Bucket, Http
from hack.benchmark.common import FLOOR_UA, HARNESS_UA, Mode, say
from hack.benchmark.control_plane import ControlPlaneSampler
from hack.benchmark.environment import Env, create_namespace, delete_namespace
from hack.benchmark.results import PhaseResult
from hack.benchmark.workload import job_names, planned_children, tfjob_body
from reconcile.api.names import TRACKING_FINALIZER


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
            for pod in pods:
                # The floor makes the creates and nothing else: no controller will ever
                # take the tracking finalizer off its pods.
                pod["metadata"]["finalizers"] = [
                    f for f in pod["metadata"]["finalizers"] if f != TRACKING_FINALIZER
                ]
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
        plane = ControlPlaneSampler(env)
        plane.start()
        say(
            f"[floor {mode.label}] bare client: concurrency {args.floor_concurrency}, "
            f"qps {mode.label}; {n} TFJobs and {2 * n * m} creates into {ns}"
        )
        t0 = time.monotonic()
        work = asyncio.ensure_future(asyncio.gather(*(one_job(j) for j in job_names(n))))
        last = t0
        while not work.done():
            await asyncio.wait({work}, timeout=min(args.progress, 1.0))
            plane.sample()
            if time.monotonic() - last >= args.progress:
                last = time.monotonic()
                say(
                    f"[floor {mode.label}] t={last - t0:5.1f}s created "
                    f"{sum(done.values())}/{2 * n * m}"
                )
        work.result()
        wall = time.monotonic() - t0
        control_plane, etcd_db = plane.finish(), plane.etcd_db_size()
        say(f"[floor {mode.label}] done in {wall:.1f}s; reading the audit log")
        events = await audit_read(env, harness, offset)
        reqs = summarize_audit(events, FLOOR_UA, ns)
        return PhaseResult.measured(
            "floor",
            mode.label,
            ns,
            reqs,
            2 * n * m,
            wall,
            control_plane=control_plane,
            etcd_db=etcd_db,
        )
    finally:
        await floor.close()
        if cleanup:
            await delete_namespace(harness, ns)
        await harness.close()
