"""--scaling 200,1000,5000: each controller phase, and the floor, run at several job counts
in one QPS mode (the first of --qps), on one cluster sized for the largest, to see how
creation, status, CPU and memory grow with the work.

Per controller and job count: creation (first submit to the last pod or service
created, server clock) and its ratio to the floor's at the same count; pod Running to
the job's status saying so, p99; CPU seconds and CPU per pod; peak RSS during the burst;
RSS when ready (no TFJob) and once every job succeeded with all its pods and services
still cached ("settled"). The RSS slope is the least-squares fit of settled RSS against
the objects the controller caches (N jobs x (M pods + M services + the job)): what each
cached object costs, without the fixed footprint. The CPU also in three parts: the start,
the work, and the end (the pods' release and the stop). Per phase also what the control
plane needed (hack/benchmark/control_plane.py). Writes <out>/scaling.md, <out>/scaling.json and
a plot, <out>/scaling.png.

With --rounds N the controller phases run N times in turn at each job count, and the
report adds each round's CPU, the ratio of ours to each other controller within the
round, and the median of those ratios: phases that run one after the other see nearly
the same machine, while this machine's speed drifts by a fifth within an hour.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from hack.benchmark.common import pct, say
from hack.benchmark.control_plane import COMPONENTS
from hack.benchmark.environment import Env
from hack.benchmark.floor import run_floor
from hack.benchmark.harness import ControllerPhase, run_controller
from hack.benchmark.report import cpu_parts, fmt
from hack.benchmark.results import PhaseResult

MB = 2**20

#: phase title ("ours", "upstream, 4 threads", "floor") -> [(jobs, result)], in run order
Table = dict[str, list[tuple[int, PhaseResult]]]
FLOOR = "floor"


def cached_objects(jobs: int, replicas: int) -> int:
    return jobs * (2 * replicas + 1)


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y on x; None with fewer than two distinct x."""
    if len({x for x, _ in points}) < 2:
        return None
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def rss_slope(args: argparse.Namespace, runs: list[tuple[int, PhaseResult]]) -> float | None:
    """Bytes per cached object."""
    points = [
        (float(cached_objects(n, args.replicas)), float(r.settled_rss))
        for n, r in runs
        if r.settled_rss
    ]
    return slope(points)


async def run_scaling(
    args: argparse.Namespace,
    env: Env,
    out: Path,
    phases: list[ControllerPhase],
    *,
    floor: bool = True,
) -> Table:
    mode = args.qps[0]
    table: Table = {}
    rounds = args.rounds
    for n in args.scaling:
        args.jobs = n
        for round_ in range(1, rounds + 1):
            for phase in phases:
                which = f", round {round_}/{rounds}" if rounds > 1 else ""
                say(f"[scaling] {n} jobs: {phase.title}{which}")
                result = await run_controller(env, args, mode, out, phase)
                table.setdefault(result.title or result.name, []).append((n, result))
                (out / "scaling.json").write_text(scaling_json(args, table))  # so far
        if floor:
            say(f"[scaling] {n} jobs: the floor")
            table.setdefault(FLOOR, []).append((n, await run_floor(env, args, mode)))
        (out / "scaling.json").write_text(scaling_json(args, table))
        (out / "scaling.md").write_text(scaling_report(args, table))
    return table


def floor_creation(table: Table, jobs: int) -> float | None:
    return next((r.creation_s for n, r in table.get(FLOOR, []) if n == jobs), None)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def scaling_report(args: argparse.Namespace, table: Table) -> str:
    mode = args.qps[0].label
    lines = [
        f"### Scaling: {', '.join(map(str, args.scaling))} TFJobs x {args.replicas} replicas,"
        f" QPS {mode}",
        "",
        "| controller | jobs | pods | creation (s) | ÷ floor | status p99 (s)"
        " | status p99 after submission (s) | CPU (s)"
        " | CPU per pod (ms) | peak RSS (MB) | RSS ready (MB) | RSS settled (MB)"
        " | jobs Succeeded |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for title, runs in table.items():
        for n, r in runs:
            pods = n * args.replicas
            floor = title == FLOOR
            lines.append(
                f"| {title} | {n} | {pods} | {fmt(r.creation_s, '.1f')}"
                f" | {'1' if floor else fmt(ratio(r.creation_s, floor_creation(table, n)), '.2f')}"
                f" | {'' if floor else fmt(pct(r.running_lat, 99), '.2f')}"
                f" | {'' if floor else fmt(pct(r.running_lat_after_submit, 99), '.2f')}"
                f" | {'' if floor else fmt(r.cpu_s)}"
                f" | {'' if floor else fmt(r.cpu_s * 1000 / pods if r.cpu_s else None, '.1f')}"
                f" | {fmt(r.peak_rss / MB if r.peak_rss else None, '.0f')}"
                f" | {fmt(r.idle_rss / MB if r.idle_rss else None, '.0f')}"
                f" | {fmt(r.settled_rss / MB if r.settled_rss else None, '.0f')}"
                f" | {'' if floor else f'{r.jobs_succeeded}/{n}'} |"
            )
    lines += ["", "| controller | RSS slope per cached object (KB, least squares) |", "|---|---|"]
    for title, runs in table.items():
        if title == FLOOR:
            continue
        s = rss_slope(args, runs)
        lines.append(f"| {title} | {fmt(s / 1024 if s is not None else None, '.2f')} |")
    lines += [
        "",
        "The controller's CPU in three parts (s): the start (until its caches synced), the"
        " work (until every job succeeded and the phase settled), the end (the pods'"
        " release and the stop).",
        "",
        "| controller | jobs | start / work / end |",
        "|---|---|---|",
    ]
    for title, runs in table.items():
        if title != FLOOR:
            lines += [f"| {title} | {n} | {cpu_parts(r)} |" for n, r in runs]
    lines += rounds_report(table)
    lines += [
        "",
        "What the control plane needed per phase: CPU seconds / peak RSS (MB); etcd's"
        " database at the end of the phase.",
        "",
        "| phase | jobs | " + " | ".join(COMPONENTS) + " | etcd DB (MB) |",
        "|---|---|" + "---|" * len(COMPONENTS) + "---|",
    ]
    for title, runs in table.items():
        for n, r in runs:
            cells = []
            for name in COMPONENTS:
                u = r.control_plane.get(name)
                cells.append("" if u is None else f"{u.cpu_s:.0f} / {u.peak_rss / MB:.0f}")
            db = fmt(r.etcd_db / MB if r.etcd_db else None, ".0f")
            lines.append(f"| {title} | {n} | " + " | ".join(cells) + f" | {db} |")
    return "\n".join(lines) + "\n"


def controllers(table: Table) -> list[str]:
    """The controllers' titles in run order, ours first (the floor is not one)."""
    return [t for t in table if t != FLOOR]


def round_ratios(table: Table) -> dict[int, list[dict[str, float | None]]]:
    """Per job count, per round: each controller's CPU, and ``"<title> ratio"``, ours
    (the first controller) to that one. The k-th run of a controller at a job count is
    its round k (run_scaling's order)."""
    titles = controllers(table)
    if len(titles) < 2:
        return {}
    ours, others = titles[0], titles[1:]
    out: dict[int, list[dict[str, float | None]]] = {}
    for n in sorted({n for n, _ in table[ours]}):
        cpu = {t: [r.cpu_s for m, r in table[t] if m == n] for t in titles}
        rounds = min(len(v) for v in cpu.values())
        out[n] = [
            {
                **{t: cpu[t][k] for t in titles},
                **{f"{t} ratio": ratio(cpu[ours][k], cpu[t][k]) for t in others},
            }
            for k in range(rounds)
        ]
    return out


def median_ratio(rows: list[dict[str, float | None]], title: str) -> float | None:
    got = [v for row in rows if (v := row.get(f"{title} ratio")) is not None]
    return statistics.median(got) if got else None


def rounds_report(table: Table) -> list[str]:
    """The CPU round by round, when some job count ran more than one round."""
    by_n = round_ratios(table)
    if not any(len(rows) > 1 for rows in by_n.values()):
        return []
    titles = controllers(table)
    others = titles[1:]
    lines = [
        "",
        f"The CPU round by round (s); the ratio is {titles[0]} to each other controller"
        " in the same round (the phases of a round run one after the other).",
        "",
        "| jobs | round | "
        + " | ".join(titles)
        + " | "
        + " | ".join(f"ratio to {t}" for t in others)
        + " |",
        "|---|---|" + "---|" * (len(titles) + len(others)),
    ]
    for n, rows in by_n.items():
        for k, row in enumerate(rows, 1):
            lines.append(
                f"| {n} | {k} | "
                + " | ".join(fmt(row[t]) for t in titles)
                + " | "
                + " | ".join(fmt(row[f"{t} ratio"], ".2f") for t in others)
                + " |"
            )
        medians = " | ".join(fmt(median_ratio(rows, t), ".2f") for t in others)
        lines.append(f"| {n} | median | " + " | " * (len(titles) - 1) + f" | {medians} |")
    return lines


def scaling_json(args: argparse.Namespace, table: Table) -> str:
    return json.dumps(
        {
            "replicas": args.replicas,
            "mode": args.qps[0].label,
            "cpu_rounds": {str(n): rows for n, rows in round_ratios(table).items()},
            "controllers": {
                title: {
                    "rss_slope_bytes_per_object": rss_slope(args, runs),
                    "runs": [
                        {
                            "jobs": n,
                            "creation_vs_floor": ratio(r.creation_s, floor_creation(table, n)),
                            **r.figures(),
                        }
                        for n, r in runs
                    ],
                }
                for title, runs in table.items()
            },
        },
        indent=2,
    )


def scaling_plot(path: Path, args: argparse.Namespace, table: Table) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (mem, cpu) = plt.subplots(1, 2, figsize=(12, 4.2))
    for title, runs in table.items():
        if title == FLOOR:
            continue
        xs = [cached_objects(n, args.replicas) for n, _ in runs]
        settled = [(r.settled_rss or 0) / MB for _, r in runs]
        peak = [(r.peak_rss or 0) / MB for _, r in runs]
        line = mem.plot(xs, settled, "o-", label=f"{title}: settled")[0]
        mem.plot(xs, peak, "^--", color=line.get_color(), label=f"{title}: peak")
        pods = [n * args.replicas for n, _ in runs]
        cpu.plot(pods, [r.cpu_s or 0 for _, r in runs], "o-", label=title)
    mem.set_xlabel("cached objects (pods + services + jobs)")
    mem.set_ylabel("RSS (MB)")
    mem.set_title("memory")
    cpu.set_xlabel("pods")
    cpu.set_ylabel("controller CPU (s)")
    cpu.set_title(f"CPU, QPS {args.qps[0].label}")
    for ax in (mem, cpu):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
