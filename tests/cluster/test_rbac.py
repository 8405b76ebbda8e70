"""The controller runs with exactly the RBAC in config/rbac, as its ServiceAccount."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.cluster.kube import ControllerProcess, Kube, sample, wait_for, wait_running
from tests.conftest import REPO, Cluster

SA_NS = "kubeflow"


def apply_manifests(cluster: Cluster, *files: Path) -> None:
    for f in files:
        cluster.kubectl("apply", "-f", str(f))


def service_account_kubeconfig(cluster: Cluster, kube: Kube, path: Path) -> None:
    """A kubeconfig that authenticates as the ServiceAccount, with a bound token."""
    token = kube.req(
        "POST",
        f"/api/v1/namespaces/{SA_NS}/serviceaccounts/tfjob-controller/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )["status"]["token"]
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    admin["users"] = [{"name": "tfjob-controller", "user": {"token": token}}]
    admin["contexts"][0]["context"]["user"] = "tfjob-controller"
    path.write_text(yaml.safe_dump(admin))


def test_least_privilege_rbac_runs_a_job_to_success(
    cluster: Cluster, controller: ControllerProcess, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    apply_manifests(
        cluster,
        REPO / "config/manager/namespace.yaml",
        REPO / "config/rbac/service_account.yaml",
        REPO / "config/rbac/role.yaml",
        REPO / "config/rbac/leader_election_role.yaml",
    )
    kubeconfig = tmp_path / "sa.kubeconfig"
    service_account_kubeconfig(cluster, kube, kubeconfig)
    # Only one controller may act on the cluster at a time.
    controller.stop()
    limited = ControllerProcess(
        cluster,
        "--leader-elect",
        f"--leader-election-namespace={SA_NS}",
        "--leader-election-id=tfjob-controller-rbac-test",
        log_name="tfjob-controller-rbac",
        kubeconfig=str(kubeconfig),
    )
    try:
        limited.start()
        job = sample()
        job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = 1
        name = kube.create_tfjob(namespace, job)["metadata"]["name"]
        wait_running(kube, namespace, name, 4, timeout=60)
        kube.exit_pod(namespace, f"{name}-chief-0", 0)
        # Succeeded, cleanPodPolicy Running applied, then deleted by its TTL: every
        # verb the controller needs, exercised under its own identity.
        wait_for(lambda: kube.tfjob(namespace, name) is None, 30, "TTL deletion")

        # Events are written in the background, best effort: wait for them.
        def reasons() -> set[str]:
            return {
                e["reason"]
                for e in kube.events(namespace)
                if e["source"].get("component") == "tfjob-controller"
            }

        wait_for(
            lambda: (
                {"SuccessfulCreatePod", "SuccessfulCreateService", "TFJobSucceeded"} <= reasons()
            ),
            30,
            "the job's events",
        )
        lease = kube.req(
            "GET",
            f"/apis/coordination.k8s.io/v1/namespaces/{SA_NS}/leases/tfjob-controller-rbac-test",
        )
        assert lease["spec"]["holderIdentity"]
        log = limited.log_path.read_text()
        assert "Forbidden" not in log and '"403' not in log, "the controller hit an RBAC denial"
    finally:
        assert limited.stop() == 0
        controller.start()
