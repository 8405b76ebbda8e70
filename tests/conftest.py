"""Test wiring: the real local control plane for cluster tests.

Tests under tests/cluster/ are marked `cluster` automatically. They use the session
fixture `cluster`, which brings the local control plane up (hack/cluster/) or reuses
a running one, with every CRD under config/crd installed and the gang scheduler
(`--gang scheduler-plugins`: Coscheduling as schedulerName scheduler-plugins-scheduler,
and its PodGroup CRD), and the fixture `namespace`, a fresh namespace per test, deleted
afterwards. The Volcano PodGroup CRD is not installed: a test that wants it calls
`cluster.install_volcano_crd()` (and `remove_volcano_crd()` when done).

With CI=true a cluster that cannot start fails the run; it is never skipped. Outside
CI the cluster tests skip, saying why, only when no Go toolchain can be had.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import hack.cluster as cluster_mod

REPO = cluster_mod.REPO


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/cluster/" in str(item.path).replace(os.sep, "/"):
            item.add_marker(pytest.mark.cluster)


@dataclass
class Cluster:
    dir: Path
    kubeconfig: str
    bin_dir: Path
    api: cluster_mod.Api

    def _hack(self, *args: str) -> str:
        out = subprocess.run(
            cluster_mod.command(*args),
            cwd=REPO,
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        )
        return out.stdout

    def restart_apiserver(self) -> None:
        """SIGKILL kube-apiserver and start it again; returns once /readyz is ok."""
        self._hack("restart", "kube-apiserver")

    def restart(self, component: str) -> None:
        self._hack("restart", component)

    def install_volcano_crd(self) -> None:
        """Install the Volcano PodGroup CRD (hack/crds/volcano-podgroups.yaml); returns
        once it is Established and scheduling.volcano.sh/v1beta1 is served."""
        cluster_mod.install_volcano_crd(self.api)

    def remove_volcano_crd(self) -> None:
        """Delete it (and every Volcano PodGroup); returns once it is no longer served."""
        cluster_mod.remove_volcano_crd(self.api)

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision, so every older resourceVersion is gone."""
        return int(self._hack("compact").strip().splitlines()[-1])

    def kubectl(self, *args: str, input: str | None = None) -> str:
        out = subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            check=True,
            stdout=subprocess.PIPE,
            input=input,
            text=True,
        )
        return out.stdout


def _go_available() -> bool:
    return shutil.which("go") is not None or shutil.which("pip") is not None


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    d = cluster_mod.cluster_dir()
    was_running = cluster_mod.load_state(d) is not None and cluster_mod.status_report(d)[0]
    proc = subprocess.run(
        cluster_mod.command("up", "--gang", "scheduler-plugins"),
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        msg = f"local cluster failed to start:\n{proc.stderr[-6000:]}"
        if os.environ.get("CI") == "true" or _go_available():
            pytest.fail(msg, pytrace=False)
        pytest.skip("no Go toolchain can be had, so the local cluster cannot be built")
    state = cluster_mod.load_state(d)
    assert state is not None
    c = Cluster(
        dir=d,
        kubeconfig=str(d / "kubeconfig"),
        bin_dir=Path(state["bin_dir"]),
        api=cluster_mod.Api(d, state["ports"]["apiserver"]),
    )
    yield c
    if not was_running and os.environ.get("TFJOB_KEEP_CLUSTER") != "1":
        subprocess.run(cluster_mod.command("down"), cwd=REPO, check=False)


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    status, body = cluster.api.request(
        "POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": {"tfjob-test": "1"}}}
    )
    assert status == 201, body
    yield name
    # The namespace controller (in KCM) finalizes it in the background.
    cluster.api.request("DELETE", f"/api/v1/namespaces/{name}")
