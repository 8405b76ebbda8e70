"""python -m tests.chaos --seed N [size flags]: one seeded run on its own cluster;
prints progress, then the report (also under chaos-out/). Exits 1 on any violation."""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict
from pathlib import Path

from tests.chaos.env import use_cluster_dir
from tests.chaos.plan import add_size_flags, make_plan, size_from
from tests.chaos.progress import say
from tests.conftest import REPO


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    p.add_argument("--seed", type=int, required=True)
    add_size_flags(p)
    p.add_argument("--out", type=Path, default=REPO / "chaos-out", help="where reports go")
    p.add_argument(
        "--cluster-dir",
        type=Path,
        default=REPO / ".cluster-chaos",
        help="the chaos cluster's state (never the default cluster's)",
    )
    p.add_argument("--keep-cluster", action="store_true", help="leave the cluster running")
    p.add_argument(
        "--quick-resume",
        action="store_true",
        help="resume a wave's jobs once Suspended is stored, pods maybe still terminating",
    )
    p.add_argument("--print-plan", action="store_true", help="print the schedule and exit")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    plan = make_plan(args.seed, size_from(args))
    if args.print_plan:
        print(json.dumps(asdict(plan), indent=1))
        return 0
    use_cluster_dir(args.cluster_dir)
    # Imported only now: the driver reads the cluster directory from the environment.
    from tests.chaos.driver import run

    say(
        f"seed {args.seed}: {len(plan.pod_faults)} pod faults, {len(plan.actions)} actions, "
        f"{len(plan.watch_faults)} watch faults over {plan.size.duration:.0f}s"
    )
    report = asyncio.run(run(plan, args.out, args.keep_cluster, args.quick_resume))
    js, txt = report.write(args.out)
    print(report.text(), end="", flush=True)
    say(f"report: {txt.relative_to(REPO) if txt.is_relative_to(REPO) else txt}, {js.name}")
    return 1 if report.violations else 0
