"""The run's size (flags) and its schedule, all drawn from the seed before anything runs:
the same seed gives the same faults, in the same order, aimed at the same jobs and
slots at the same offsets (what happens in between is up to the controller).

Three timelines run side by side:
- pod faults (graceful delete, force delete, eviction, container kill), spread over the
  run; each waits for its target to be fair (see driver.PodFaults);
- watch faults every ~30 s through a replica's proxy (reset, stall, latency);
- the big actions, one at a time and each only once the controller pair is steady:
  controller SIGKILLs, leader partitions, apiserver and etcd restarts, suspend/resume
  waves. The first controller kill lands in the initial create burst; every other wave
  has one in its resume burst.
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass, field, fields

from tests.chaos.model import EXIT, KILL_KINDS

KILL, PARTITION, APISERVER, ETCD, WAVE = (
    "controller-kill",
    "partition",
    "apiserver-restart",
    "etcd-restart",
    "suspend-wave",
)
RANDOM, BURST, STATUS = "random", "create-burst", "status-write"
RESET, STALL, LATENCY = "reset", "stall", "latency"


@dataclass(frozen=True)
class Size:
    jobs: int = 50
    kills: int = 300
    exits: int = 40
    controller_kills: int = 10
    partitions: int = 3
    apiserver_restarts: int = 2
    etcd_restarts: int = 1
    suspend_waves: int = 4
    watch_fault_every: float = 30.0
    duration: float = 480.0


@dataclass(frozen=True)
class PodFault:
    t: float
    job: int
    pick: float  # which slot of the job: index into its slots, scaled
    kind: str


@dataclass(frozen=True)
class Action:
    t: float
    kind: str
    trigger: str = RANDOM  # controller kills: when to strike
    follower: bool = False  # controller kills: the follower instead of the leader
    kill_in_resume: bool = False  # waves: SIGKILL the leader in the resume burst
    share: float = 0.5  # waves: the share of the quiet jobs suspended


@dataclass(frozen=True)
class WatchFault:
    t: float
    kind: str
    leader: bool
    seconds: float


@dataclass
class Plan:
    seed: int
    size: Size
    pod_faults: list[PodFault] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    watch_faults: list[WatchFault] = field(default_factory=list)


def make_plan(seed: int, size: Size) -> Plan:
    rng = random.Random(seed)
    span = size.duration
    plan = Plan(seed, size)

    kinds = [KILL_KINDS[i % len(KILL_KINDS)] for i in range(size.kills)] + [EXIT] * size.exits
    rng.shuffle(kinds)
    times = sorted(rng.uniform(10, span * 0.85) for _ in kinds)
    plan.pod_faults = [
        PodFault(t, rng.randrange(size.jobs), rng.random(), k)
        for t, k in zip(times, kinds, strict=True)
    ]

    kills = size.controller_kills
    in_resume = min(size.suspend_waves // 2, max(kills - 1, 0))
    big = (
        [PARTITION] * size.partitions
        + [APISERVER] * size.apiserver_restarts
        + [ETCD] * size.etcd_restarts
        + [WAVE] * size.suspend_waves
        + [KILL] * max(kills - 1 - in_resume, 0)
    )
    rng.shuffle(big)
    # One per equal segment of the run (after the initial burst), so they spread out.
    seg = (span * 0.85 - 20) / max(len(big), 1)
    waves_seen, kill_i, wave_kills_left = 0, 0, in_resume
    if kills:
        plan.actions.append(Action(0.0, KILL, BURST))
    for i, kind in enumerate(big):
        t = 20 + seg * i + rng.uniform(0.2, 0.8) * seg
        if kind == WAVE:
            kill_here = waves_seen % 2 == 1 and wave_kills_left > 0
            wave_kills_left -= kill_here
            waves_seen += 1
            plan.actions.append(
                Action(t, WAVE, kill_in_resume=kill_here, share=rng.uniform(0.4, 0.6))
            )
        elif kind == KILL:
            trigger = (STATUS, RANDOM)[kill_i % 2]
            plan.actions.append(Action(t, KILL, trigger, follower=rng.random() < 0.2))
            kill_i += 1
        else:
            plan.actions.append(Action(t, kind))

    t = 15.0
    while t < span * 0.9:
        kind = rng.choice((RESET, STALL, LATENCY))
        seconds = {RESET: 0.0, STALL: rng.uniform(2, 6), LATENCY: rng.uniform(0.2, 0.8)}[kind]
        plan.watch_faults.append(WatchFault(t, kind, rng.random() < 0.7, seconds))
        t += size.watch_fault_every * rng.uniform(0.8, 1.2)
    return plan


HELP = {
    "jobs": "concurrent TFJobs",
    "kills": "pod kills, split over graceful delete, force delete and eviction",
    "exits": "container kills (exit 137): retries (in place under OnFailure and Always), or"
    " failures under Never",
    "partitions": "times the leader is cut off by its proxy",
    "watch_fault_every": "seconds between watch faults (reset, stall, latency)",
    "duration": "seconds over which the faults are spread",
}


def add_size_flags(p: argparse.ArgumentParser) -> None:
    """One flag per Size field (--controller-kills for controller_kills), its default."""
    for f in fields(Size):
        p.add_argument(
            "--" + f.name.replace("_", "-"),
            type=type(f.default),
            default=f.default,
            help=f"{HELP.get(f.name, f.name.replace('_', ' '))} (default {f.default:g})",
        )


def size_from(args: argparse.Namespace) -> Size:
    return Size(**{f.name: getattr(args, f.name) for f in fields(Size)})
