"""A controller as a child process, sampled for CPU and RSS with psutil: ours with the
mode's QPS, optionally under pyinstrument, or the upstream binary (--compare upstream)."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp
import psutil

import hack.cluster as cluster_mod
from hack.benchmark.common import REPO, UPSTREAM_UA, Mode
from hack.benchmark.environment import Env

#: The packages the controller runs from, byte-compiled before it starts (byte_compile).
PACKAGES = ("controller", "reconcile", "tfjob_controller")


@functools.cache
def byte_compile(python: str | None = None) -> None:
    """Write the bytecode of the controller's own packages, as its image ships it
    (hack/build-controller-image.sh). Run from the source tree with
    PYTHONDONTWRITEBYTECODE set, every start would compile them again: ~0.2 s of CPU and
    of start-up in each phase that the deployed controller never pays. Once a run."""
    py = python or str(REPO / ".venv" / "bin" / "python")
    subprocess.run(
        [py, "-m", "compileall", "-q", *(str(REPO / pkg) for pkg in PACKAGES)],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def client_flags(env: Env, mode: Mode, threads: int, health: int) -> list[str]:
    """The flags both controllers share: the cluster, the mode's QPS, threads, ports."""
    return [
        f"--kubeconfig={env.kubeconfig}",
        f"--kube-api-qps={mode.qps:g}",
        f"--kube-api-burst={mode.burst}",
        f"--controller-threads={threads}",
        f"--metrics-bind-address=127.0.0.1:{cluster_mod.free_port()}",
        f"--health-probe-bind-address=127.0.0.1:{health}",
    ]


class ControllerProc:
    def __init__(
        self, argv: list[str], health: int, log_path: Path, profile_session: Path | None = None
    ) -> None:
        self.health = health
        self.log_path = log_path
        self.profile_session = profile_session
        logf = open(self.log_path, "wb")
        #: wall clock at exec, to set against the audit log's first list (start-up)
        self.exec_t = time.time()
        self.proc = subprocess.Popen(
            argv,
            stdout=logf,
            stderr=subprocess.STDOUT,
            cwd=str(REPO),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        logf.close()
        self.ps = psutil.Process(self.proc.pid)
        self.peak_rss = 0
        #: RSS once ready (caches synced), before any TFJob: the idle footprint
        self.idle_rss = 0
        #: CPU seconds once ready: the start (imports, set-up, the first lists)
        self.ready_cpu: float | None = None
        self.rss_samples: list[tuple[float, int]] = []
        self.cpu = 0.0

    @classmethod
    def ours(
        cls,
        env: Env,
        mode: Mode,
        out: Path,
        profile: bool,
        threads: int,
        extra: Sequence[str] = (),
        log_name: str = "ours",
    ) -> ControllerProc:
        health = cluster_mod.free_port()
        flags = [*client_flags(env, mode, threads, health), "--log-format=json", *extra]
        py = REPO / ".venv" / "bin" / "python"
        python = str(py) if py.exists() else sys.executable
        byte_compile(python)
        session = out / "profile.pyisession" if profile else None
        if session:
            argv = [
                python,
                "-m",
                "pyinstrument",
                "-r",
                "pyisession",
                "-o",
                str(session),
                "-m",
                "tfjob_controller",
                *flags,
            ]
        else:
            # e.g. TFJOB_BENCH_WRAP="-m cProfile -o /tmp/prof.out": the controller under a
            # profiler of one's choosing (its figures then carry that profiler's overhead)
            wrap = os.environ.get("TFJOB_BENCH_WRAP", "").split()
            argv = [python, *wrap, "-m", "tfjob_controller", *flags]
        log = f"controller-{mode.slug}.log" if log_name == "ours" else f"{log_name}-{mode.slug}.log"
        return cls(argv, health, out / log, session)

    @classmethod
    def upstream(
        cls, binary: Path, env: Env, mode: Mode, out: Path, threads: int
    ) -> ControllerProc:
        """The upstream TFJob controller (hack/upstream-operator/); its requests carry
        UPSTREAM_UA, and a QPS <= 0 lifts its client-side limit as ours does."""
        health = cluster_mod.free_port()
        argv = [
            str(binary),
            *client_flags(env, mode, threads, health),
            f"--user-agent={UPSTREAM_UA}",
        ]
        return cls(argv, health, out / f"upstream-{threads}t-{mode.slug}.log")

    def sample(self) -> None:
        try:
            rss = self.ps.memory_info().rss
            t = self.ps.cpu_times()
        except psutil.Error:
            return
        self.peak_rss = max(self.peak_rss, rss)
        self.cpu = t.user + t.system
        self.rss_samples.append((time.monotonic(), rss))

    def mark_idle(self) -> None:
        self.sample()
        if self.rss_samples:
            self.idle_rss = self.rss_samples[-1][1]
            self.ready_cpu = self.cpu

    def vm_hwm(self) -> int:
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    async def wait_ready(self, limit_s: float = 60) -> None:
        deadline = time.monotonic() + limit_s
        async with aiohttp.ClientSession() as s:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"controller exited; see {self.log_path}")
                try:
                    async with s.get(
                        f"http://127.0.0.1:{self.health}/readyz",
                        timeout=aiohttp.ClientTimeout(total=1),
                    ) as r:
                        if r.status == 200:
                            return
                except (aiohttp.ClientError, TimeoutError):
                    pass
                await asyncio.sleep(0.2)
        raise RuntimeError("controller not ready")

    def stop(self) -> None:
        self.sample()
        self.peak_rss = max(self.peak_rss, self.vm_hwm())
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60 if self.profile_session else 20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
