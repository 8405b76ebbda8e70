"""The command line: flags, the controller phases (ours; with --compare upstream also the
upstream controller's) and one floor phase per QPS mode, and the files written to --out."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from hack.benchmark import __doc__ as package_doc
from hack.benchmark.common import REPO, parse_modes, say
from hack.benchmark.environment import Env, cluster_down, cluster_up
from hack.benchmark.floor import run_floor
from hack.benchmark.harness import ControllerPhase, ours_phase, run_controller
from hack.benchmark.report import fmt, plot, render_profile, report
from hack.benchmark.results import ModeRun
from hack.benchmark.scaling import run_scaling, scaling_json, scaling_plot, scaling_report
from hack.benchmark.upstream import build_upstream, upstream_name, upstream_phases


async def bench(
    args: argparse.Namespace, env: Env, out: Path, others: list[ControllerPhase]
) -> list[ModeRun]:
    runs = []
    for i, mode in enumerate(args.qps):
        phases = [ours_phase(args.controller_threads, args.profile and i == 0), *others]
        phases[1:1] = [ours_phase(args.controller_threads, False, x) for x in args.status_pace]
        controllers = [await run_controller(env, args, mode, out, phase) for phase in phases]
        # The last namespace goes with the cluster, unless the cluster stays.
        last = i == len(args.qps) - 1
        floor = await run_floor(env, args, mode, cleanup=args.keep_cluster or not last)
        runs.append(ModeRun(controllers, floor))
        say(
            f"mode {mode.label}: "
            + ", ".join(f"{r.name} {fmt(r.creation_s, '.2f')}s" for r in [*controllers, floor])
        )
    return runs


T = TypeVar("T")


def on_cluster(args: argparse.Namespace, work: Coroutine[Any, Any, T]) -> T | None:
    """Run the bench's work on its cluster, stopping the cluster after (unless
    --keep-cluster); None when interrupted."""
    try:
        return asyncio.run(work)
    except KeyboardInterrupt:
        say("interrupted")
        return None
    finally:
        if not args.keep_cluster:
            say("stopping the bench cluster (--keep-cluster leaves it up)")
            cluster_down()


def main(argv: list[str] | None = None) -> int:
    from controller.client.api import ClientSettings

    summary = (package_doc or "").split("\n")[0]
    p = argparse.ArgumentParser(prog="hack/bench", description=summary)
    numbers: list[tuple[str, type, float, str]] = [
        ("--jobs", int, 200, "TFJobs"),
        ("--replicas", int, 8, "replicas per job: 1 Chief + M-1 Workers"),
        ("--controller-threads", int, 4, "the controller's --threads"),
        ("--timeout", float, 420, "limit per controller phase (s)"),
        ("--settle", float, 1.0, "seconds the controller runs on after the last job succeeded"),
        ("--progress", float, 3.0, "progress line interval (s)"),
        ("--nodes", int, 20, "kwok nodes, at least"),
        ("--node-pods", int, 200, "pods per kwok node"),
    ]
    for flag, kind, default, what in numbers:
        p.add_argument(flag, type=kind, default=kind(default), help=f"{what} (default {default})")
    p.add_argument(
        "--qps",
        type=parse_modes,
        default=parse_modes("unlimited,20/30"),
        help="comma-separated client QPS modes, e.g. unlimited,20/30 (default)",
    )
    p.add_argument(
        "--floor-concurrency",
        type=int,
        default=ClientSettings().pool_size,
        help="the floor's semaphore (default: the controller's connection pool)",
    )
    p.add_argument(
        "--profile", action="store_true", help="run the first controller phase under pyinstrument"
    )
    p.add_argument(
        "--compare",
        action="append",
        choices=["upstream"],
        default=[],
        help="also run the upstream TFJob controller (kubeflow/training-operator, built by "
        "hack/build-binaries.sh --upstream-operator) with --controller-threads and with its "
        "default 1, per QPS mode",
    )
    p.add_argument(
        "--scaling",
        type=lambda text: sorted({int(x) for x in text.split(",") if x.strip()}),
        default=None,
        help="comma-separated job counts, e.g. 200,1000,5000: each controller phase and the"
        " floor at each count, in the first --qps mode only; creation and its ratio to the"
        " floor, status p99, CPU per pod, peak RSS, the RSS slope per cached object and"
        " what the control plane needed (scaling.md, scaling.json, scaling.png)",
    )
    p.add_argument(
        "--only",
        type=lambda text: {x.strip() for x in text.split(",") if x.strip()},
        default=None,
        help="with --scaling: only these phases, by name (ours, upstream-4t, upstream-1t,"
        " floor), e.g. to finish a run that was stopped",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --scaling: the controller phases run this many times in turn at each job"
        " count (ours, then the others, then ours again...), the floor once; the report"
        " gives each round's CPU ratios and their median: a machine whose speed drifts"
        " moves phases that run side by side together (default 1)",
    )
    p.add_argument(
        "--status-pace",
        type=lambda text: [float(x) for x in text.split(",") if x.strip()],
        default=[],
        help="comma-separated seconds, e.g. 0.5: one more phase of ours for each, run with"
        " that --status-pace (named ours-pace500ms for --only)",
    )
    p.add_argument("--keep-cluster", action="store_true", help="leave the bench cluster up")
    p.add_argument("--out", default=str(REPO / "bench-out"))
    args = p.parse_args(argv)
    if args.jobs < 1 or args.replicas < 1:
        p.error("--jobs and --replicas must be >= 1")
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    os.environ.setdefault("TFJOB_CLUSTER_DIR", str(REPO / ".cluster-bench"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    others: list[ControllerPhase] = []
    if "upstream" in args.compare:
        others += upstream_phases(build_upstream(), args.controller_threads)
        args.upstream_name = upstream_name()
    if args.scaling:
        return scaling_main(args, out, others)
    env = cluster_up(args, args.jobs * args.replicas)
    runs = on_cluster(args, bench(args, env, out, others))
    if runs is None:
        return 130
    if args.profile:
        render_profile(out)
    table = report(args, runs)
    (out / "results.md").write_text(table)
    raw = [{phase.name: phase.figures() for phase in [*run.controllers, run.floor]} for run in runs]
    (out / "results.json").write_text(
        json.dumps({"jobs": args.jobs, "replicas": args.replicas, "runs": raw}, indent=2)
    )
    plot(out / "created-over-time.png", runs)
    print()
    print(table)
    say(f"wrote {out / 'results.md'}, {out / 'results.json'}, {out / 'created-over-time.png'}")
    return 0


def scaling_main(args: argparse.Namespace, out: Path, others: list[ControllerPhase]) -> int:
    if min(args.scaling) < 1:
        raise SystemExit("--scaling: job counts must be >= 1")
    env = cluster_up(args, max(args.scaling) * args.replicas)
    phases = [ours_phase(args.controller_threads, False), *others]
    phases[1:1] = [ours_phase(args.controller_threads, False, x) for x in args.status_pace]
    only = args.only
    if only is not None:
        known = {phase.name for phase in phases} | {"floor"}
        if only - known:
            raise SystemExit(f"--only: no phase {sorted(only - known)} (known: {sorted(known)})")
        phases = [phase for phase in phases if phase.name in only]
    floor = only is None or "floor" in only
    table = on_cluster(args, run_scaling(args, env, out, phases, floor=floor))
    if table is None:
        return 130
    text = scaling_report(args, table)
    (out / "scaling.md").write_text(text)
    (out / "scaling.json").write_text(scaling_json(args, table))
    scaling_plot(out / "scaling.png", args, table)
    print()
    print(text)
    say(f"wrote {out / 'scaling.md'}, {out / 'scaling.json'}, {out / 'scaling.png'}")
    return 0
