"""The session controller's training-progress endpoint: its address (the host's, which
pods on the real node reach through their bridge), and a serving certificate signed
by a CA of the test cluster's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hack.cluster import node
from hack.cluster.pki import ensure_serving_cert, make_pki
from tests.conftest import Cluster, cluster_mod


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
    ip = node.node_ip()
    ensure_serving_cert(pki, "progress", ["127.0.0.1", ip], ["localhost"])
    port = cluster_mod.free_port()
    url = f"https://{ip}:{port}"
    flags = (
        f"--progress-url={url}",
        f"--progress-bind-address=:{port}",
        f"--progress-cert-file={pki / 'progress.crt'}",
        f"--progress-key-file={pki / 'progress.key'}",
        f"--progress-ca-file={pki / 'ca.crt'}",
        # a test's job reports show within a second of each other, not five
        "--progress-status-interval=1",
    )
    return Endpoint(url, pki / "ca.crt", flags)
