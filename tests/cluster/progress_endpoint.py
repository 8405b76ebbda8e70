"""The session controller's training-progress endpoint: its address (the host's, which
pods on the real node reach through their bridge), and a serving certificate signed
by a CA of the test cluster's."""

from __future__ import annotations

import http.client
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from hack.cluster.pki import make_pki
from hack.run_local import progress_flags
from tests.cluster.kube import ControllerProcess, Kube
from tests.conftest import Cluster


@dataclass(frozen=True)
class Endpoint:
    url: str
    ca_file: Path
    flags: tuple[str, ...]


def progress_endpoint(cluster: Cluster) -> Endpoint:
    pki = cluster.dir / "pki"
    if not (pki / "ca.key").exists():  # an existing cluster's: a CA of our own
        pki = cluster.dir / "progress-pki"
        if not (pki / "ca.key").exists():
            make_pki(pki)
    flags = progress_flags(pki)
    url = next(f for f in flags if f.startswith("--progress-url=")).split("=", 1)[1]
    # a test's job reports show within a second of each other, not five
    return Endpoint(url, pki / "ca.crt", (*flags, "--progress-status-interval=1"))


def audience(ns: str, name: str) -> str:
    return f"tfjob.kubeflow.org/{ns}/{name}"


def mint(kube: Kube, ns: str, pod: dict[str, Any], aud: str, seconds: int = 600) -> str:
    """A token of the pod's service account bound to the pod: a projected token, asked
    for as the kubelet asks for one."""
    meta = pod["metadata"]
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [aud],
            "expirationSeconds": seconds,
            "boundObjectRef": {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": meta["name"],
                "uid": meta["uid"],
            },
        },
    }
    sa = pod["spec"].get("serviceAccountName", "default")
    out = kube.req("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token", body)
    return str(out["status"]["token"])


class Reporter:
    """One pod's connection to the endpoint, kept alive as the helper keeps it."""

    def __init__(self, controller: ControllerProcess) -> None:
        ep: Endpoint = controller.progress
        self.base = ep.url
        host, port = ep.url.removeprefix("https://").rsplit(":", 1)
        self.ctx = ssl.create_default_context(cafile=str(ep.ca_file))
        self.conn = http.client.HTTPSConnection(host, int(port), context=self.ctx, timeout=10)

    def post(
        self, path: str, token: str | None, body: bytes, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], dict[str, Any]]:
        h = {"Content-Type": "application/json", **(headers or {})}
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        self.conn.request("POST", path, body=body, headers=h)
        r = self.conn.getresponse()
        raw = r.read()
        if r.getheader("Connection", "").lower() == "close":
            self.conn.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, orjson.loads(raw) if raw else {}

    def close(self) -> None:
        self.conn.close()


def report_path(ns: str, name: str) -> str:
    return f"/v1/namespaces/{ns}/tfjobs/{name}/progress"
