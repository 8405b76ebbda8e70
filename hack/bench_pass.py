#!/usr/bin/env python3
"""Benchmark: the CPU of one planning pass over a running job that reports nothing and
sets no annotation (every job of `hack/bench`'s 200 x 8 is one), in microseconds.

    .venv/bin/python -m hack.bench_pass [--code DIR] [--workers 7] [--rounds 7] [--passes 2000]

Each pass reads the job as an informer update hands it over (a new object, the same
spec), through the spec cache, and plans it with its pods running and nothing to do;
the pods' views are the last pass's, as the reconciler keeps them (``--fresh-views``:
read afresh each pass). The figure is the median of ``--rounds`` rounds of ``--passes``
passes, in process CPU time. ``--code DIR`` measures another checkout (a worktree of an
earlier commit): run two in turn, on an otherwise idle machine, to compare code and not
machines.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--code", help="a checkout whose reconcile/ and tests/ to measure")
    p.add_argument("--workers", type=int, default=7, help="plus one Chief")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--passes", type=int, default=2000)
    p.add_argument(
        "--fresh-views",
        action="store_true",
        help="read every pod each pass, as if none had been seen before",
    )
    args = p.parse_args()
    if args.code:
        sys.path.insert(0, args.code)  # before the first import of reconcile

    from reconcile.api.spec import SpecCache
    from reconcile.objects import observed as observed_mod
    from reconcile.objects.observed import observe_all
    from reconcile.plan import PlanConfig, Snapshot, compute_plan
    from tests.builders import at, make_pod, make_service, make_tfjob

    builder = make_tfjob("bench").chief().worker(args.workers)
    job = builder.obj()
    kinds = [("Chief", 0)] + [("Worker", i) for i in range(args.workers)]
    pods = [make_pod(job, rt, i).running().obj() for rt, i in kinds]
    services = [make_service(job, rt, i) for rt, i in kinds]
    cfg = PlanConfig()
    first = compute_plan(
        Snapshot(SpecCache().read("ns/bench", job), observe_all(pods), services, at(100)), cfg
    )
    job = builder.status(first.status).obj()
    cache = SpecCache()
    # The reconciler hands each pass the views its job's last pass read, and a pod whose
    # cached object is the same keeps its view (reconcile.objects.observed); a checkout
    # from before that reads every pod each pass.
    by_uid = getattr(observed_mod, "by_uid", None)
    known = by_uid(observe_all(pods)) if by_uid is not None and not args.fresh_views else None

    def one() -> object:
        raw = {**job, "metadata": dict(job["metadata"])}  # as an informer update hands it
        view = cache.read("ns/bench", raw)
        seen = observe_all(pods, known) if known is not None else observe_all(pods)
        return compute_plan(Snapshot(view, seen, services, at(200)), cfg)

    plan = one()
    assert getattr(plan, "status", None) is None, "the job should have nothing to write"
    rounds = []
    for r in range(args.rounds):
        start = time.process_time()
        for _ in range(args.passes):
            one()
        rounds.append((time.process_time() - start) / args.passes * 1e6)
        print(f"round {r + 1}/{args.rounds}: {rounds[-1]:.1f} us", file=sys.stderr, flush=True)
    import reconcile

    print(
        f"{reconcile.__file__.rsplit('/reconcile/', 1)[0]}: {statistics.median(rounds):.1f} us"
        f" per pass (median of {args.rounds} x {args.passes}), {len(kinds)} replicas"
        f"{', views read afresh' if known is None else ''}"
    )


if __name__ == "__main__":
    main()
