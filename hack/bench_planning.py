#!/usr/bin/env python3
"""Benchmark: planning time per pod of a new job, by job size (the pure planner, no
cluster).

    .venv/bin/python -m hack.bench_planning [--replicas 10,100,1000] [--rounds 5]

Prints, for each size, the best of ``--rounds`` plans of a fresh job (a Chief, one PS,
the rest Workers) in microseconds per pod. Each pod's TF_CONFIG lists the whole cluster,
so the bytes written grow with the job; the time per pod should stay about flat
(tests/unit/test_fuzz.py checks the property behind it by counting, not timing).
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime

from reconcile.api.spec import read_job
from reconcile.plan import PlanConfig, Snapshot, compute_plan
from tests.builders import make_tfjob


def per_pod_us(replicas: int, rounds: int) -> float:
    job = read_job(make_tfjob("t").chief().ps(1).worker(replicas - 2).obj())
    now = datetime(2024, 1, 1, tzinfo=UTC)
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        plan = compute_plan(Snapshot(job, [], [], now), PlanConfig())
        best = min(best, time.perf_counter() - start)
    assert len(plan.create_pods) == replicas
    return best * 1e6 / replicas


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", default="10,100,1000")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    for n in (int(x) for x in args.replicas.split(",")):
        print(f"{n:6d} replicas: {per_pod_us(n, args.rounds):7.1f} us per pod", flush=True)


if __name__ == "__main__":
    main()
