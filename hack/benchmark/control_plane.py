"""What the control plane needed during a phase: each component's CPU and peak RSS, and
etcd's database size at the end (from etcd's own /metrics), so a scaling table can say
what the apiserver and etcd took to serve a controller at that size; and the wait for a
quiet machine before a phase's controller starts."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from dataclasses import dataclass, field

import psutil

import hack.cluster as cluster_mod
from hack.benchmark.environment import Env

#: the components reported, in the table's order
COMPONENTS = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok")

_DB_SIZE = re.compile(rb"^etcd_mvcc_db_total_size_in_bytes\s+(\S+)$", re.M)


@dataclass
class Usage:
    cpu_s: float
    peak_rss: int


@dataclass
class ControlPlaneSampler:
    """Samples the local cluster's processes (by the PIDs ``hack/cluster.sh`` recorded)
    from ``start`` until ``finish``; ``sample`` as often as the phase samples its
    controller."""

    env: Env
    _procs: dict[str, psutil.Process] = field(default_factory=dict)
    _cpu0: dict[str, float] = field(default_factory=dict)
    _cpu: dict[str, float] = field(default_factory=dict)
    _peak: dict[str, int] = field(default_factory=dict)

    def start(self) -> None:
        state = cluster_mod.load_state(self.env.dir) or {}
        for name in COMPONENTS:
            pid = (state.get("pids") or {}).get(name)
            if pid is None:
                continue
            try:
                proc = psutil.Process(pid)
                t = proc.cpu_times()
            except psutil.Error:
                continue
            self._procs[name] = proc
            self._cpu0[name] = self._cpu[name] = t.user + t.system
            self._peak[name] = 0
        self.sample()

    def sample(self) -> None:
        for name, proc in self._procs.items():
            try:
                rss = proc.memory_info().rss
                t = proc.cpu_times()
            except psutil.Error:
                continue
            self._peak[name] = max(self._peak[name], rss)
            self._cpu[name] = t.user + t.system

    def finish(self) -> dict[str, Usage]:
        self.sample()
        return {
            name: Usage(self._cpu[name] - self._cpu0[name], self._peak[name])
            for name in self._procs
        }

    def etcd_db_size(self) -> int | None:
        state = cluster_mod.load_state(self.env.dir) or {}
        port = (state.get("ports") or {}).get("etcd")
        if port is None:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                found = _DB_SIZE.search(r.read())
        except OSError:
            return None
        return int(float(found.group(1))) if found else None


#: A phase's controller starts once the whole machine used less than this share of its
#: CPUs over a second (percent), or after ``QUIET_LIMIT_S`` whatever it uses.
QUIET_BELOW_PERCENT = 10.0
QUIET_LIMIT_S = 30.0


async def wait_quiet(
    below: float = QUIET_BELOW_PERCENT, limit_s: float = QUIET_LIMIT_S
) -> tuple[float, float]:
    """Wait for a quiet machine before a controller starts: (seconds waited, the last
    second's CPU in percent of all CPUs). Whatever the cluster's own start or the
    previous phase's clean-up (a namespace's deletion, the garbage collector) still
    does must not run beside the controller's start and be counted into its CPU time.
    Both controllers wait alike."""
    t0 = time.monotonic()
    psutil.cpu_percent(None)
    busy = 100.0
    while time.monotonic() - t0 < limit_s:
        await asyncio.sleep(1.0)
        busy = psutil.cpu_percent(None)
        if busy < below:
            break
    return time.monotonic() - t0, busy
