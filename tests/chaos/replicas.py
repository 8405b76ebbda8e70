"""Two controller replicas with --leader-elect, each behind its own fault proxy, and a
supervisor that restarts whichever exits (SIGKILLed by the driver, or exited itself after
losing the lease), as a Deployment would.

Every start gets a new identity (``chaos-<slot>-<n>``), passed as
--leader-election-identity and so carried in its User-Agent: a restarted replica is a new
holder in the Lease, and the audit log tells each process's requests apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.chaos.progress import say
from tests.chaos.proxy import FaultProxy
from tests.cluster.kube import ControllerProcess
from tests.conftest import Cluster

LEASE_NS = "default"
LEASE_NAME = "tfjob-controller.kubeflow.org"


def proxied_kubeconfig(cluster: Cluster, proxy: FaultProxy, out: Path) -> str:
    cfg = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    cfg["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    out.write_text(yaml.safe_dump(cfg))
    return str(out)


@dataclass(eq=False)
class Replica:
    slot: str
    cluster: Cluster
    proxy: FaultProxy
    flags: tuple[str, ...]
    generation: int = 0
    proc: ControllerProcess | None = None
    exits: list[tuple[str, int]] = field(default_factory=list)  # (identity, code)
    #: the supervisor leaves it down (partitioned: it restarts once healed)
    held_down: bool = False

    @property
    def identity(self) -> str:
        return f"chaos-{self.slot}-{self.generation}"

    def alive(self) -> bool:
        return (
            self.proc is not None and self.proc.proc is not None and self.proc.proc.poll() is None
        )

    async def start(self) -> None:
        self.generation += 1
        kubeconfig = proxied_kubeconfig(
            self.cluster, self.proxy, self.cluster.dir / f"chaos-{self.slot}.kubeconfig"
        )
        self.proc = ControllerProcess(
            self.cluster,
            *self.flags,
            f"--leader-election-identity={self.identity}",
            log_name=f"chaos-{self.slot}",
            kubeconfig=kubeconfig,
        )
        try:
            await asyncio.to_thread(self.proc.start)
        except (AssertionError, RuntimeError) as e:
            # Not ready in time (the apiserver restarting) or exited: the supervisor
            # sees which and acts.
            say(f"replica {self.identity} not ready: {e}")
        say(f"started replica {self.identity}")

    async def exited(self, timeout: float) -> bool:
        """Whether the process ends within ``timeout`` seconds."""
        if not self.alive():
            return True
        assert self.proc is not None and self.proc.proc is not None
        try:
            await asyncio.to_thread(self.proc.proc.wait, timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    async def kill(self) -> None:
        """SIGKILL, like an OOM kill or a node loss."""
        if self.proc is not None and self.alive():
            await asyncio.to_thread(self.proc.stop, signal.SIGKILL)

    async def stop(self) -> None:
        if self.proc is not None and self.alive():
            await asyncio.to_thread(self.proc.stop, signal.SIGTERM)


class Supervisor:
    def __init__(self, replicas: list[Replica]) -> None:
        self.replicas = replicas
        self.unexpected_exits = 0
        self.stopping = False

    def by_identity(self, identity: str) -> Replica | None:
        return next((r for r in self.replicas if r.identity == identity), None)

    async def run(self) -> None:
        while not self.stopping:
            for r in self.replicas:
                if self.stopping or r.alive() or r.held_down or r.proc is None:
                    continue
                assert r.proc.proc is not None
                code = r.proc.proc.returncode
                r.exits.append((r.identity, code))
                if code != -signal.SIGKILL:
                    self.unexpected_exits += 1
                    say(f"replica {r.identity} exited with {code}; restarting")
                await r.start()
            await asyncio.sleep(0.5)

    async def stop(self) -> None:
        self.stopping = True
        for r in self.replicas:
            with contextlib.suppress(Exception):
                await r.stop()
