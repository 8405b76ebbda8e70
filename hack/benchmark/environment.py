"""The bench cluster (its own directory, audit log on) and namespaces in it."""

from __future__ import annotations

import argparse
import asyncio
import math
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import hack.cluster as cluster_mod
from hack.benchmark.client import Http
from hack.benchmark.common import REPO, say


@dataclass
class Env:
    dir: Path
    kubeconfig: Path
    base: str
    ctx: ssl.SSLContext
    audit: Path


def cluster_up(args: argparse.Namespace, pods_needed: int) -> Env:
    nodes = max(args.nodes, math.ceil(pods_needed * 1.25 / args.node_pods))
    say(
        f"starting the bench cluster in {cluster_mod.cluster_dir()} "
        f"({nodes} nodes x {args.node_pods} pods, audit log on)"
    )
    subprocess.run(
        cluster_mod.command("up", "--audit", f"--nodes={nodes}", f"--node-pods={args.node_pods}"),
        cwd=REPO,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    d = cluster_mod.cluster_dir()
    state = cluster_mod.load_state(d)
    assert state is not None
    audit = d / "logs" / "audit.log"
    if not audit.exists():
        raise SystemExit(
            f"the cluster in {d} runs without an audit log; stop it with "
            f"TFJOB_CLUSTER_DIR={d} hack/cluster.sh down and run the bench again"
        )
    ctx = ssl.create_default_context(cafile=str(d / "pki" / "ca.crt"))
    ctx.load_cert_chain(str(d / "pki" / "admin.crt"), str(d / "pki" / "admin.key"))
    return Env(d, d / "kubeconfig", f"https://127.0.0.1:{state['ports']['apiserver']}", ctx, audit)


def cluster_down() -> None:
    subprocess.run(
        cluster_mod.command("down"),
        cwd=REPO,
        check=False,
        stdout=subprocess.DEVNULL,
    )


async def create_namespace(http: Http, ns: str) -> None:
    status, body = await http.req(
        "POST", "/api/v1/namespaces", {"metadata": {"name": ns, "labels": {"bench": "1"}}}
    )
    if status != 201:
        raise RuntimeError(f"create namespace {ns}: {status} {body}")
    # ServiceAccount admission refuses pods until KCM has made the namespace's default
    # ServiceAccount; a benchmark that raced it would time create retries.
    path = f"/api/v1/namespaces/{ns}/serviceaccounts/default"
    for _ in range(1500):
        status, _ = await http.req("GET", path)
        if status == 200:
            return
        await asyncio.sleep(0.02)
    raise RuntimeError(f"no default ServiceAccount in {ns}")


DELETE_NOW = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}


async def delete_children(http: Http, ns: str, plurals: tuple[str, ...]) -> None:
    """Delete every pod or service of ``ns`` (grace 0, so kwok need not act; one DELETE
    per object in parallel, as a collection delete runs them one by one)."""
    sem = asyncio.Semaphore(32)

    async def delete(path: str) -> None:
        async with sem:
            await http.req("DELETE", path, DELETE_NOW)

    for plural in plurals:
        names = await list_names(http, f"/api/v1/namespaces/{ns}/{plural}")
        await asyncio.gather(
            *(delete(f"/api/v1/namespaces/{ns}/{plural}/{name}") for name in names)
        )


#: objects a page: one unpaged list of 40,000 pods is half a gigabyte of JSON for the
#: apiserver to build and the harness to hold
PAGE = 500


async def list_names(http: Http, path: str) -> list[str]:
    """The names of every object at ``path``, listed a page at a time."""
    names: list[str] = []
    token = ""
    while True:
        query = f"?limit={PAGE}" + (f"&continue={quote(token, safe='')}" if token else "")
        status, lst = await http.req("GET", path + query)
        if status != 200:
            return names
        names += [item["metadata"]["name"] for item in lst["items"]]
        token = (lst.get("metadata") or {}).get("continue") or ""
        if not token:
            return names


async def wait_no_pods(http: Http, ns: str, limit_s: float) -> float | None:
    """Seconds until ``ns`` has no pod left (deleted pods go once nothing holds them),
    None past ``limit_s``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        # one pod is enough to say some are left
        status, lst = await http.req("GET", f"/api/v1/namespaces/{ns}/pods?limit=1")
        if status == 200 and not lst["items"]:
            return time.monotonic() - t0
        await asyncio.sleep(0.25)
    return None


async def delete_namespace(http: Http, ns: str, limit_s: float = 900) -> None:
    """Remove pods and services at once, then the namespace, and wait until it is gone."""
    t0 = time.monotonic()
    await delete_children(http, ns, ("pods", "services"))
    t_objects = time.monotonic() - t0
    await http.req("DELETE", f"/api/v1/namespaces/{ns}", DELETE_NOW)
    while time.monotonic() - t0 < limit_s:
        status, _ = await http.req("GET", f"/api/v1/namespaces/{ns}")
        if status == 404:
            say(
                f"namespace {ns} deleted in {time.monotonic() - t0:.1f}s "
                f"(pods and services {t_objects:.1f}s)"
            )
            return
        await asyncio.sleep(0.5)
    say(f"WARNING: namespace {ns} still terminating after {limit_s:.0f}s")
