"""The controller runs with exactly the RBAC in config/rbac, as its ServiceAccount."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.kube import (
    ControllerProcess,
    Kube,
    sample,
    wait_for,
    wait_namespaces_gone,
    wait_running,
)
from tests.conftest import REPO, Cluster

#: needs kwok pods that exit on the test's say
pytestmark = pytest.mark.local_only

SA_NS = "kubeflow"


def apply_manifests(cluster: Cluster, *files: Path) -> None:
    for f in files:
        cluster.kubectl("apply", "-f", str(f))


def apply_controller_rbac(cluster: Cluster) -> None:
    """config/'s namespace, the controller's ServiceAccount and its roles."""
    apply_manifests(
        cluster,
        REPO / "config/manager/namespace.yaml",
        REPO / "config/rbac/service_account.yaml",
        REPO / "config/rbac/role.yaml",
        REPO / "config/rbac/leader_election_role.yaml",
    )


def token_for(kube: Kube, account: str, ns: str = SA_NS) -> str:
    """A bound token of a ServiceAccount (TokenRequest)."""
    return str(
        kube.req(
            "POST",
            f"/api/v1/namespaces/{ns}/serviceaccounts/{account}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600},
            },
        )["status"]["token"]
    )


def service_account_kubeconfig(cluster: Cluster, kube: Kube, path: Path) -> None:
    """A kubeconfig that authenticates as the ServiceAccount, with a bound token."""
    token = token_for(kube, "tfjob-controller")
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    admin["users"] = [{"name": "tfjob-controller", "user": {"token": token}}]
    admin["contexts"][0]["context"]["user"] = "tfjob-controller"
    path.write_text(yaml.safe_dump(admin))


def test_least_privilege_rbac_runs_a_job_to_success(
    cluster: Cluster, controller: ControllerProcess, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    apply_controller_rbac(cluster)
    kubeconfig = tmp_path / "sa.kubeconfig"
    service_account_kubeconfig(cluster, kube, kubeconfig)
    wait_namespaces_gone(kube)
    # Only one controller may act on the cluster at a time.
    controller.stop()
    limited = ControllerProcess(
        cluster,
        "--leader-elect",
        f"--leader-election-namespace={SA_NS}",
        "--leader-election-id=tfjob-controller-rbac-test",
        # gang scheduling on: PodGroups and PriorityClasses are within the role too
        "--gang-scheduler-name=scheduler-plugins-scheduler",
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
                {
                    "SuccessfulCreatePod",
                    "SuccessfulCreateService",
                    "TFJobSucceeded",
                    "SuccessfulDeletePodGroup",
                }
                <= reasons()
            ),
            30,
            "the job's events",
        )
        lease = kube.req(
            "GET",
            f"/apis/coordination.k8s.io/v1/namespaces/{SA_NS}/leases/tfjob-controller-rbac-test",
        )
        assert lease["spec"]["holderIdentity"]
        log = limited.log_text()
        # An RBAC denial reads 'pods is forbidden: User "system:serviceaccount:..." cannot
        # create resource ...'; other 403s (a namespace being deleted) are not ours to fix.
        assert " cannot " not in log, "the controller hit an RBAC denial"
    finally:
        code = limited.stop()
        controller.start()  # whatever happened: the tests after this one need it
    assert code == 0


def _create_child_as(cluster: Cluster, token: str, ns: str, owner: dict[str, Any]) -> int:
    """POST a pod owned by ``owner`` (blockOwnerDeletion, as the controller's children
    are) with a ServiceAccount's token; the HTTP status."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "owned-",
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "TFJob",
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    ctx = ssl.create_default_context(cafile=str(cluster.dir / "pki" / "ca.crt"))
    request = urllib.request.Request(
        # dryRun: admission runs in full (the plugin included), nothing is stored
        f"{cluster.api.base}/api/v1/namespaces/{ns}/pods?dryRun=All",
        data=json.dumps(pod).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, context=ctx, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_owner_references_permission_enforcement_is_on_and_the_role_passes_it(
    cluster: Cluster, kube: Kube, namespace: str
) -> None:
    """The local apiserver enforces blockOwnerDeletion permissions as hardened clusters
    do: the controller's role (with tfjobs/finalizers update) may create children; the
    same role without that rule may not."""
    apply_manifests(
        cluster,
        REPO / "config/manager/namespace.yaml",
        REPO / "config/rbac/service_account.yaml",
        REPO / "config/rbac/role.yaml",
    )
    owner = kube.create_tfjob(namespace, sample())
    assert _create_child_as(cluster, token_for(kube, "tfjob-controller"), namespace, owner) == 201

    role = next(
        doc
        for doc in yaml.safe_load_all((REPO / "config/rbac/role.yaml").read_text())
        if doc["kind"] == "ClusterRole"
    )
    rules = [r for r in role["rules"] if "tfjobs/finalizers" not in r["resources"]]
    assert len(rules) == len(role["rules"]) - 1
    weaker = "tfjob-controller-no-finalizers"
    manifests = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": weaker, "namespace": SA_NS},
        },
        {**role, "metadata": {"name": weaker}, "rules": rules},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": weaker},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": weaker,
            },
            "subjects": [{"kind": "ServiceAccount", "name": weaker, "namespace": SA_NS}],
        },
    ]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(manifests))
    try:
        assert _create_child_as(cluster, token_for(kube, weaker), namespace, owner) == 403
    finally:
        cluster.kubectl("delete", "clusterrolebinding,clusterrole", weaker, "--ignore-not-found")


def _allowed(kube: Kube, user: str, verb: str, ns: str, name: str) -> bool:
    """The apiserver's own authorizer: may ``user`` ``verb`` the ConfigMap ``name``."""
    review = kube.req(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{SA_NS}"],
                "resourceAttributes": {
                    "namespace": ns,
                    "verb": verb,
                    "resource": "configmaps",
                    "name": name,
                },
            },
        },
    )
    return bool(review["status"].get("allowed"))


def test_the_role_reads_and_patches_no_configmap_but_the_progress_ca(
    cluster: Cluster, kube: Kube, namespace: str
) -> None:
    """A compromised controller cannot patch the ConfigMaps that grant access elsewhere
    (kube-system/aws-auth on EKS): get and patch are the CA's alone."""
    apply_controller_rbac(cluster)
    user = f"system:serviceaccount:{SA_NS}:tfjob-controller"
    for verb in ("get", "patch"):
        assert _allowed(kube, user, verb, namespace, "tfjob-progress-ca")
        assert not _allowed(kube, user, verb, namespace, "some-other")
        assert not _allowed(kube, user, verb, "kube-system", "aws-auth")
    assert _allowed(kube, user, "create", namespace, "")
    assert not _allowed(kube, user, "update", namespace, "tfjob-progress-ca")
    assert not _allowed(kube, user, "delete", namespace, "tfjob-progress-ca")
