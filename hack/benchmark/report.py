"""The markdown table, the plot of objects created over time, and the profile."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from hack.benchmark.audit import (
    ALL_RESOURCES,
    codes,
    other_writes,
    release_writes,
    status_writes,
    workload_writes,
)
from hack.benchmark.common import REPO, pct, say
from hack.benchmark.results import ModeRun, PhaseResult


def fmt(v: float | None, spec: str = ".1f", unit: str = "") -> str:
    return "n/a" if v is None else f"{v:{spec}}{unit}"


def ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 1000:.0f}"


def cpu_parts(r: PhaseResult) -> str:
    """The start / the work / the end, as PhaseResult.cpu_parts splits the CPU."""
    parts = r.cpu_parts()
    return "n/a" if parts is None else " / ".join(f"{v:.1f}" for v in parts)


def report(args: argparse.Namespace, runs: list[ModeRun]) -> str:
    """One column per controller phase (one per QPS mode unless --compare), each with
    its mode's floor."""
    n, m = args.jobs, args.replicas
    minimum = 2 * n * m + 3 * n
    compare = bool(args.compare)
    cols = [(c, run.floor) for run in runs for c in run.controllers]

    def title(o: PhaseResult) -> str:
        return f"QPS {o.mode}, {o.title}" if compare else f"QPS {o.mode}"

    head = "| | " + " | ".join(title(o) for o, _ in cols) + " |"
    sep = "|---|" + "---|" * len(cols)
    rows: list[tuple[str, list[str]]] = []

    def row(label: str, f: Any) -> None:
        if compare:  # the columns are no longer all ours
            label = label.replace(", ours (s)", " (s)").replace(
                "ours / floor", "controller / floor"
            )
        rows.append((label, [f(o, fl) for o, fl in cols]))

    row(
        "(a) submit → all pods+services created, ours (s)",
        lambda o, f: fmt(o.creation_s, ".2f") + (" (profiled)" if o.profiled else ""),
    )
    row("(e) same creates, bare client floor (s)", lambda o, f: fmt(f.creation_s, ".2f"))
    row(
        "(e) ours / floor",
        lambda o, f: fmt(
            o.creation_s / f.creation_s if o.creation_s and f.creation_s else None, ".2f"
        ),
    )
    row(
        "(b) pod Running → TFJob status, p50 / p99 (ms)",
        lambda o, f: (
            f"{ms(pct(o.running_lat, 50))} / {ms(pct(o.running_lat, 99))} (n={len(o.running_lat)})"
        ),
    )
    row(
        "(b) the same, pods started after the last job was submitted (ms)",
        lambda o, f: (
            f"{ms(pct(o.running_lat_after_submit, 50))} / {ms(pct(o.running_lat_after_submit, 99))}"
            f" (n={len(o.running_lat_after_submit)}; submitted in {fmt(o.submit_s, '.1f')} s)"
        ),
    )
    row(
        "(b) chief Succeeded → TFJob Succeeded, p50 / p99 (ms)",
        lambda o, f: (
            f"{ms(pct(o.succeeded_lat, 50))} / {ms(pct(o.succeeded_lat, 99))}"
            f" (n={len(o.succeeded_lat)})"
        ),
    )
    row("jobs Succeeded", lambda o, f: f"{o.jobs_succeeded}/{n}")
    row(
        "(c) pod creates: 201 / 409 duplicate / other",
        lambda o, f: codes(o.requests, "create", "pods"),
    )
    row(
        "(c) service creates: 201 / 409 duplicate / other",
        lambda o, f: codes(o.requests, "create", "services"),
    )
    row(
        "(c) TFJob status writes (total, per job)",
        lambda o, f: f"{status_writes(o.requests)} ({status_writes(o.requests) / n:.2f})",
    )
    row("(c) other writes on pods/services/tfjobs", lambda o, f: str(other_writes(o.requests)))
    row(
        f"(c) tracking-finalizer releases: pod patches / pods ({n * m})",
        lambda o, f: (
            f"{release_writes(o.requests)} / {n * m} = {release_writes(o.requests) / (n * m):.2f}"
        ),
    )
    row(
        "(c) all pods deleted → gone, finalizers released (s)",
        lambda o, f: fmt(o.released_s, ".1f"),
    )
    row(
        f"(c) workload writes / minimum ({minimum} = 2·N·M + 3·N)",
        lambda o, f: (
            f"{workload_writes(o.requests)} / {minimum} = "
            f"{workload_writes(o.requests) / minimum:.2f}"
        ),
    )
    row(
        "(c) event writes (create / patch)",
        lambda o, f: (
            f"{o.requests.count('create', 'events')} / {o.requests.count('patch', 'events')}"
        ),
    )
    row(
        "(c) reads (list / watch / get)",
        lambda o, f: " / ".join(
            str(o.requests.total((verb,), ALL_RESOURCES)) for verb in ("list", "watch", "get")
        ),
    )
    row("(d) controller CPU (s)", lambda o, f: fmt(o.cpu_s, ".1f"))
    row(
        "(d) controller CPU: start / work / pods' release and stop (s)",
        lambda o, f: cpu_parts(o),
    )
    row(
        "(d) controller peak RSS (MB)",
        lambda o, f: fmt(o.peak_rss / 2**20 if o.peak_rss else None, ".0f"),
    )
    row(
        "(d) controller RSS when ready, no TFJob yet (MB)",
        lambda o, f: fmt(o.idle_rss / 2**20 if o.idle_rss else None, ".0f"),
    )
    row("(d) start-up: exec → first list request (s)", lambda o, f: fmt(o.startup_s, ".2f"))
    row("phase wall time, ours / floor (s)", lambda o, f: f"{o.wall_s:.1f} / {f.wall_s:.1f}")
    row(
        f"1-min load average at phase end, ours / floor ({os.cpu_count()} CPUs)",
        lambda o, f: f"{o.load:.1f} / {f.load:.1f}",
    )
    versus = f"upstream ({args.upstream_name}) vs floor" if compare else "floor"
    lines = [
        f"### tfjob-controller vs {versus}: {n} TFJobs x {m} replicas "
        f"({n * m} pods, {n * m} services), {args.controller_threads} controller threads, "
        f"floor concurrency {args.floor_concurrency}",
        "",
        head,
        sep,
        *[f"| {label} | " + " | ".join(vals) + " |" for label, vals in rows],
        "",
        "Requests by verb and resource (controller, from the audit log):",
        "",
    ]
    for o, _f in cols:
        detail = ", ".join(
            f"{v} {r} {c}: {k}" for (v, r, c), k in sorted(o.requests.by_verb.items())
        )
        lines.append(f"- {title(o)}: {detail}")
    return "\n".join(lines) + "\n"


def plot(path: Path, runs: list[ModeRun]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 4.2), squeeze=False)
    for ax, run in zip(axes[0], runs, strict=True):
        others = run.controllers[1:]
        series = [(run.controllers[0], "-", "tfjob-controller")]
        series += [(o, ("-.", ":")[i % 2], o.title) for i, o in enumerate(others)]
        series.append((run.floor, "--", "floor (bare client)"))
        for res, style, label in series:
            if res.requests.first_submit is None or not res.requests.creates_t:
                continue
            xs = [t - res.requests.first_submit for t in res.requests.creates_t]
            ys = list(range(1, len(xs) + 1))
            ax.plot([0.0, *xs], [0, *ys], style, label=label)
        ax.set_title(f"QPS {run.floor.mode}")
        ax.set_xlabel("seconds since first TFJob submitted")
        ax.set_ylabel("pods + services created")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_profile(out: Path) -> None:
    session = out / "profile.pyisession"
    if not session.exists():
        say("WARNING: no profile session was written")
        return
    py = REPO / ".venv" / "bin" / "python"
    python = str(py) if py.exists() else sys.executable
    for renderer, name, extra in (
        ("html", "profile.html", []),
        ("text", "profile.txt", ["--no-color", "--unicode"]),
    ):
        subprocess.run(
            [
                python,
                "-m",
                "pyinstrument",
                f"--load={session}",
                "-r",
                renderer,
                "-o",
                str(out / name),
                *extra,
            ],
            check=False,
        )
    say(f"profile written to {out / 'profile.html'} and {out / 'profile.txt'}")
