"""Replacing only the TFJob part of a Training Operator install (docs/operations.md):
upstream's operator runs its other kinds with TFJob left out of --enable-scheme and its
TFJob webhook removed, our CRD replaces theirs, our controller runs beside it; then
back again.

Upstream is the binary the benchmark builds (hack/upstream-operator: upstream's own
reconcilers and webhooks, from kubeflow/training-operator's module), run as a process
with its PyTorchJob controller and webhook; its validating webhooks are upstream's
manifest with the TFJob entry taken out, as the docs say, pointed at that process."""

from __future__ import annotations

import base64
import copy
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import hack.cluster as cluster_mod
from hack.benchmark.upstream import build_upstream
from hack.run_local import ensure_serving_cert
from reconcile.api.names import TRACKING_FINALIZER
from tests.cluster.kube import (
    ApiFailure,
    ControllerProcess,
    Kube,
    is_true,
    release_finalizers,
    wait_for,
    wait_job,
    wait_namespaces_gone,
    wait_running,
)
from tests.cluster.policy_helpers import make_job
from tests.conftest import REPO, Cluster

pytestmark = [pytest.mark.local_only, pytest.mark.timeout(600)]

OURS = REPO / "config" / "crd" / "kubeflow.org_tfjobs.yaml"
UPSTREAM_UA = "tfjob-upstream"
VWC = "validator.training-operator.kubeflow.org"
PYTORCHJOBS = "/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"


@pytest.fixture(scope="module")
def upstream() -> Path:
    return build_upstream()


class Upstream:
    """The upstream operator as a process, with the kinds it is given."""

    def __init__(self, cluster: Cluster, binary: Path, certs: Path, *schemes: str) -> None:
        self.health = cluster_mod.free_port()
        self.webhook_port = cluster_mod.free_port()
        self.log = cluster.dir / "logs" / "upstream-side-by-side.log"
        with open(self.log, "ab") as out:
            self.log_start = out.tell()  # the log is shared with earlier runs
            self.proc = subprocess.Popen(
                [
                    str(binary),
                    f"--kubeconfig={cluster.kubeconfig}",
                    f"--user-agent={UPSTREAM_UA}",
                    "--metrics-bind-address=0",
                    f"--health-probe-bind-address=127.0.0.1:{self.health}",
                    f"--webhook-cert-dir={certs}",
                    f"--webhook-port={self.webhook_port}",
                    *(f"--enable-scheme={s}" for s in schemes),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_for(self.ready, 60, "the upstream operator ready")

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"upstream exited with {self.proc.returncode}; see {self.log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health}/readyz", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def log_text(self) -> str:
        """What this process has logged."""
        with open(self.log, "rb") as f:
            f.seek(self.log_start)
            return f.read().decode(errors="replace")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def webhooks(manifest: Path, port: int, ca: bytes, kinds: set[str]) -> dict[str, Any]:
    """Upstream's ValidatingWebhookConfiguration with only ``kinds``' entries (the TFJob
    one taken out as the docs say), each pointed at the process instead of its Service."""
    (vwc,) = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    out = copy.deepcopy(vwc)
    out["metadata"] = {"name": VWC}
    kept = []
    for hook in vwc["webhooks"]:
        resources = {r for rule in hook["rules"] for r in rule["resources"]}
        if not resources & kinds:
            continue
        path = hook["clientConfig"]["service"]["path"]
        kept.append(
            {
                **hook,
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}{path}",
                    "caBundle": base64.b64encode(ca).decode(),
                },
            }
        )
    out["webhooks"] = kept
    return out


def pytorchjob(name: str, container: str = "pytorch") -> dict[str, Any]:
    template = {
        "spec": {
            "containers": [{"name": container, "image": "pytorch:fake", "command": ["true"]}],
        }
    }
    replica = {"replicas": 1, "restartPolicy": "Never", "template": template}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": {"Master": replica, "Worker": copy.deepcopy(replica)}},
    }


def managers(obj: dict[str, Any]) -> set[str]:
    return {f.get("manager", "") for f in obj["metadata"].get("managedFields") or []}


def accepted(kube: Kube, name: str) -> None:
    """Wait for the CRD to be served with its names accepted (`kubectl wait` gives up
    on a CRD with no conditions yet, as a new one has for a moment)."""

    def check() -> bool:
        crd = kube.req("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conds = {
            c["type"]: c["status"] for c in (crd or {}).get("status", {}).get("conditions") or []
        }
        return conds.get("Established") == "True" and conds.get("NamesAccepted") == "True"

    wait_for(check, 30, f"{name} established, its names accepted")


def replace_crd(cluster: Cluster, kube: Kube, path: Path) -> None:
    """Replace the TFJob CRD whole; its names must be accepted, not only served."""
    cluster.kubectl("replace", "-f", str(path))
    accepted(kube, "tfjobs.kubeflow.org")


def serves_ours(kube: Kube) -> bool:
    crd = kube.req(
        "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/tfjobs.kubeflow.org"
    )
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return "trainingProgress" in schema["properties"]["status"]["properties"]


@pytest.fixture
def certs(cluster: Cluster, tmp_path: Path) -> Iterator[Path]:
    """A serving certificate for the webhooks, signed by the cluster's CA, named as
    controller-runtime's webhook server reads it."""
    pki = cluster.dir / "pki"
    ensure_serving_cert(pki, "upstream-webhook", ["127.0.0.1"], ["localhost"])
    d = tmp_path / "webhook-certs"
    d.mkdir()
    shutil.copy(pki / "upstream-webhook.crt", d / "tls.crt")
    shutil.copy(pki / "upstream-webhook.key", d / "tls.key")
    yield d


def test_ours_for_tfjob_beside_upstream_for_the_rest_and_back(
    cluster: Cluster,
    controller: ControllerProcess,
    kube: Kube,
    namespace: str,
    upstream: Path,
    certs: Path,
) -> None:
    ns = namespace
    crds = upstream.parent.parent / "crds"
    ca = (cluster.dir / "pki" / "ca.crt").read_bytes()
    running: Upstream | None = None
    try:
        # An install as upstream left it: its TFJob CRD; its PyTorchJob CRD.
        replace_crd(cluster, kube, crds / "kubeflow.org_tfjobs.yaml")
        assert not serves_ours(kube)
        # (server-side: too large for client-side apply's last-applied annotation)
        cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", str(crds / "kubeflow.org_pytorchjobs.yaml")
        )  # fmt: skip
        accepted(kube, "pytorchjobs.kubeflow.org")

        # The steps: TFJob out of upstream's schemes and webhooks, our CRD over theirs.
        running = Upstream(cluster, upstream, certs, "pytorchjob")
        hooks = webhooks(crds / "webhooks.yaml", running.webhook_port, ca, {"pytorchjobs"})
        assert [h["name"] for h in hooks["webhooks"]] == [
            "validator.pytorchjob.training-operator.kubeflow.org"
        ]
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(hooks))
        replace_crd(cluster, kube, OURS)
        assert serves_ours(kube)

        # Both kinds run, each under its own controller.
        pt_path = PYTORCHJOBS.format(ns=ns)
        kube.req("POST", pt_path, pytorchjob("torch"))
        kube.create_tfjob(ns, make_job("tf", workers=(2, "Never")))
        wait_for(
            lambda: is_true(kube.req("GET", f"{pt_path}/torch"), "Running"),
            60,
            "the PyTorchJob Running under upstream",
        )
        wait_running(kube, ns, "tf", 2, timeout=60)
        kube.exit_pod(ns, "torch-master-0", 0, container="pytorch")
        kube.exit_pod(ns, "tf-worker-0", 0)
        wait_for(
            lambda: is_true(kube.req("GET", f"{pt_path}/torch"), "Succeeded"),
            60,
            "the PyTorchJob Succeeded",
        )
        tf = wait_job(kube, ns, "tf", "Succeeded", timeout=60)
        # Upstream's PyTorchJob webhook is live; a TFJob reaches no webhook of theirs.
        with pytest.raises(ApiFailure) as denied:
            kube.req("POST", pt_path, pytorchjob("bad", container="other"))
        assert denied.value.status in (400, 403, 422)
        assert "pytorch" in str(denied.value.body)

        # Nothing fights: the TFJob and its pods were written by ours alone, and the
        # PyTorchJob's pods by upstream alone.
        assert not any(m.startswith(UPSTREAM_UA) for m in managers(tf)), managers(tf)
        for pod in kube.req("GET", f"/api/v1/namespaces/{ns}/pods")["items"]:
            owner = pod["metadata"]["ownerReferences"][0]["kind"]
            wrote = managers(pod)
            if owner == "TFJob":
                assert not any(m.startswith(UPSTREAM_UA) for m in wrote), wrote
                assert TRACKING_FINALIZER in pod["metadata"].get("finalizers", []) or (
                    pod["status"]["phase"] in ("Succeeded", "Failed")
                )
            else:
                assert owner == "PyTorchJob" and any(m.startswith(UPSTREAM_UA) for m in wrote)
                assert TRACKING_FINALIZER not in (pod["metadata"].get("finalizers") or [])
        started = [ln for ln in running.log_text().splitlines() if "Starting Controller" in ln]
        assert started and not [ln for ln in started if "tfjob" in ln.lower()], started

        # Back: ours stopped and its pods let go, upstream's CRD and TFJob scheme again.
        wait_namespaces_gone(kube)
        controller.stop()
        released = release_finalizers(cluster)
        assert released.returncode == 0, released.stderr
        running.stop()
        replace_crd(cluster, kube, crds / "kubeflow.org_tfjobs.yaml")
        running = Upstream(cluster, upstream, certs, "tfjob", "pytorchjob")
        kube.create_tfjob(ns, make_job("back", workers=(2, "Never")))
        pods = wait_running(kube, ns, "back", 2, timeout=60)
        assert all(any(m.startswith(UPSTREAM_UA) for m in managers(p)) for p in pods)
    finally:
        if running is not None:
            running.stop()
        cluster.kubectl("delete", "validatingwebhookconfiguration", VWC, "--ignore-not-found")
        replace_crd(cluster, kube, OURS)
        cluster.kubectl("delete", "crd", "pytorchjobs.kubeflow.org", "--ignore-not-found")
        if controller.proc is not None and controller.proc.poll() is not None:
            controller.start()  # the tests after this one need it
