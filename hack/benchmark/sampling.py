"""The controller as a child process: started with the mode's QPS, sampled for CPU and
RSS with psutil, optionally under pyinstrument."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import psutil

import hack.cluster as cluster_mod
from hack.benchmark.common import REPO, Mode
from hack.benchmark.environment import Env


class ControllerProc:
    def __init__(self, env: Env, mode: Mode, out: Path, profile: bool, threads: int) -> None:
        self.health = cluster_mod.free_port()
        self.log_path = out / f"controller-{mode.slug}.log"
        self.profile_session = out / "profile.pyisession" if profile else None
        flags = [
            f"--kubeconfig={env.kubeconfig}",
            f"--kube-api-qps={mode.qps:g}",
            f"--kube-api-burst={mode.burst}",
            f"--controller-threads={threads}",
            "--log-format=json",
            f"--metrics-bind-address=127.0.0.1:{cluster_mod.free_port()}",
            f"--health-probe-bind-address=127.0.0.1:{self.health}",
        ]
        py = REPO / ".venv" / "bin" / "python"
        python = str(py) if py.exists() else sys.executable
        if self.profile_session:
            argv = [
                python,
                "-m",
                "pyinstrument",
                "-r",
                "pyisession",
                "-o",
                str(self.profile_session),
                "-m",
                "tfjob_controller.app",
                *flags,
            ]
        else:
            argv = [python, "-m", "tfjob_controller.app", *flags]
        logf = open(self.log_path, "wb")
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
        self.rss_samples: list[tuple[float, int]] = []
        self.cpu = 0.0

    def sample(self) -> None:
        try:
            rss = self.ps.memory_info().rss
            t = self.ps.cpu_times()
        except psutil.Error:
            return
        self.peak_rss = max(self.peak_rss, rss)
        self.cpu = t.user + t.system
        self.rss_samples.append((time.monotonic(), rss))

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
