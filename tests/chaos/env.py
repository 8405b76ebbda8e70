"""The chaos cluster (its own directory, audit log on with the chaos policy) and the
driver's API client, which rides out apiserver and etcd restarts."""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

import hack.cluster as cluster_mod
from hack.benchmark.client import Http
from tests.chaos.progress import say
from tests.conftest import REPO, Cluster

POLICY = Path(__file__).with_name("audit-policy.yaml")
DRIVER_UA = "tfjob-chaos"


def use_cluster_dir(d: Path) -> None:
    """Every hack.cluster command (and Cluster's) acts on ``d`` from now on."""
    os.environ["TFJOB_CLUSTER_DIR"] = str(d.resolve())


def cluster_up(nodes: int) -> Cluster:
    d = cluster_mod.cluster_dir()
    say(f"starting the chaos cluster in {d.name}/ ({nodes} nodes, audit log on)")
    subprocess.run(
        cluster_mod.command("up", "--audit", f"--audit-policy={POLICY}", f"--nodes={nodes}"),
        cwd=REPO,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    state = cluster_mod.load_state(d)
    assert state is not None
    if not (state.get("audit") or {}).get("policy") == str(POLICY.resolve()):
        raise SystemExit(
            f"the cluster in {d} was not started with the chaos audit policy; stop it with "
            f"TFJOB_CLUSTER_DIR={d} hack/cluster.sh down and run again"
        )
    return Cluster(
        dir=d,
        kubeconfig=str(d / "kubeconfig"),
        bin_dir=Path(state["bin_dir"]),
        api=cluster_mod.Api(d, state["ports"]["apiserver"]),
    )


def cluster_down() -> None:
    subprocess.run(cluster_mod.command("down"), cwd=REPO, check=False, stdout=subprocess.DEVNULL)


def apiserver_port(cluster: Cluster) -> int:
    return int(cluster.api.base.rsplit(":", 1)[1])


class Unreachable(Exception):
    """The apiserver did not answer (connection refused, reset, timed out)."""


@dataclass
class Api:
    """The driver's requests, straight to the apiserver (never through a fault proxy)."""

    http: Http

    @classmethod
    def connect(cls, cluster: Cluster) -> Api:
        ctx = ssl.create_default_context(cafile=str(cluster.dir / "pki" / "ca.crt"))
        pki = cluster.dir / "pki"
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return cls(Http(cluster.api.base, ctx, DRIVER_UA, limit=64))

    async def close(self) -> None:
        await self.http.close()

    async def once(
        self, method: str, path: str, body: Any = None, ctype: str = "application/json"
    ) -> tuple[int, Any]:
        try:
            return await self.http.req(method, path, body, ctype=ctype)
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise Unreachable(f"{method} {path}: {e!r}") from e

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        ctype: str = "application/json",
        patience: float = 180,
    ) -> tuple[int, Any]:
        """Retried while the apiserver is away or answers 429/5xx (a restart, etcd down);
        only for requests that may be repeated (reads, idempotent writes)."""
        deadline = time.monotonic() + patience
        while True:
            try:
                status, out = await self.once(method, path, body, ctype)
            except Unreachable:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
                continue
            if (status < 500 and status != 429) or time.monotonic() > deadline:
                return status, out
            await asyncio.sleep(0.5)

    async def patch(self, path: str, patch: dict[str, Any]) -> tuple[int, Any]:
        return await self.call("PATCH", path, patch, "application/merge-patch+json")
