"""The controller deployed in the cluster with its Helm chart, on the real node: its
image (hack/build-controller-image.sh) run by containerd, as its ServiceAccount with
in-cluster configuration, non-root on a read-only root filesystem, two replicas behind
the Lease; TFJobs on the kwok nodes reconciled by it through install, failover, upgrade
and an uninstall with jobs still running.

The local cluster has no kube-proxy, so the Service `kubernetes` leads nowhere: the
pods are told the apiserver's own address (KUBERNETES_SERVICE_HOST/PORT, which
in-cluster configuration reads), where kube-proxy would have sent them."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.cluster import node as node_mod
from reconcile.api.names import TRACKING_FINALIZER
from tests.cluster.chart import CHART, RELEASE, helm
from tests.cluster.kube import (
    ApiFailure,
    ControllerProcess,
    Kube,
    release_finalizers,
    wait_for,
    wait_job,
    wait_namespaces_gone,
    wait_running,
)
from tests.cluster.policy_helpers import make_job
from tests.cluster.test_rbac import token_for
from tests.cluster.test_secure_metrics import curl
from tests.conftest import REPO, Cluster

pytestmark = [pytest.mark.local_only, pytest.mark.timeout(900)]

LEASE = "tfjob-controller.kubeflow.org"
CRD = "tfjobs.kubeflow.org"
#: the chart's cluster-scoped objects: left by earlier tests that applied config/ (not
#: Helm's to adopt), and what the uninstall must leave no trace of
CLUSTER_ROLES = (
    "tfjob-controller",
    "tfjob-controller-metrics-reader",
    "tfjob-controller-uninstall",
)
CLUSTER_ROLE_BINDINGS = ("tfjob-controller", "tfjob-controller-uninstall")


def values(cluster: Cluster, path: Path) -> Path:
    port = cluster.api.base.rsplit(":", 1)[1]
    doc = {
        "image": {
            "repository": node_mod.CONTROLLER_IMAGE.rsplit(":", 1)[0],
            "tag": node_mod.CONTROLLER_IMAGE.rsplit(":", 1)[1],
            "pullPolicy": "Never",  # imported into the node's containerd; no registry
        },
        "replicaCount": 2,
        "nodeSelector": node_mod.NODE_LABELS,
        "tolerations": [{**node_mod.REAL_NODE_TAINT, "operator": "Equal"}],
        "extraEnv": [
            {"name": "KUBERNETES_SERVICE_HOST", "value": node_mod.node_ip()},
            {"name": "KUBERNETES_SERVICE_PORT", "value": str(port)},
        ],
        # two replicas and the hook on a 2-core node beside the tests
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def controller_pods(kube: Kube, ns: str) -> list[dict[str, Any]]:
    out = kube.req(
        "GET",
        f"/api/v1/namespaces/{ns}/pods?labelSelector=app.kubernetes.io/name%3Dtfjob-controller",
    )
    return sorted(out["items"], key=lambda p: p["metadata"]["name"])


def ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod.get("status", {}).get("conditions") or []
    )


def holder(kube: Kube, ns: str) -> str:
    lease = kube.req("GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{LEASE}")
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def leader_pod(kube: Kube, ns: str, among: list[dict[str, Any]]) -> str | None:
    """The pod whose identity (hostname_<random>) holds the Lease."""
    who = holder(kube, ns)
    names = [p["metadata"]["name"] for p in among if who.startswith(p["metadata"]["name"] + "_")]
    return names[0] if names else None


def uids(kube: Kube, ns: str, job: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.pods(ns, job)}


def finish(kube: Kube, ns: str, job: str) -> None:
    kube.exit_pod(ns, f"{job}-worker-0", 0)
    wait_job(kube, ns, job, "Succeeded", timeout=60)


def gone(kube: Kube, path: str) -> bool:
    try:
        return kube.req("GET", path) is None
    except ApiFailure:
        return False


def test_the_chart_runs_the_controller_in_the_cluster_through_failover_upgrade_and_uninstall(
    cluster: Cluster,
    controller: ControllerProcess,
    kube: Kube,
    namespace: str,
    controller_image: str,
    ops_tools: Path,
    tmp_path: Path,
) -> None:
    ns, release_ns = namespace, f"tfjob-system-{uuid.uuid4().hex[:6]}"
    wait_namespaces_gone(kube)
    controller.stop()  # one controller acts on a job at a time: the deployed one here
    cluster.kubectl("delete", "clusterrole", *CLUSTER_ROLES, "--ignore-not-found")
    cluster.kubectl("delete", "clusterrolebinding", *CLUSTER_ROLE_BINDINGS, "--ignore-not-found")
    # The CRD the cluster was set up with is handed to the release, as an operator moving
    # from `kubectl apply -k config/default` to the chart hands it over.
    cluster.kubectl("label", "crd", CRD, "app.kubernetes.io/managed-by=Helm", "--overwrite")
    cluster.kubectl(
        "annotate",
        "crd",
        CRD,
        f"meta.helm.sh/release-name={RELEASE}",
        f"meta.helm.sh/release-namespace={release_ns}",
        "--overwrite",
    )
    kubeconfig = str(cluster.kubeconfig)
    chart_values = values(cluster, tmp_path / "values.yaml")
    installed = False
    try:
        helm(
            ops_tools,
            "install", RELEASE, str(CHART), f"--namespace={release_ns}", "--create-namespace",
            f"--values={chart_values}", "--wait", "--timeout=240s",
            kubeconfig=kubeconfig,
        )  # fmt: skip
        installed = True
        pods = wait_for(
            lambda: (
                (p := controller_pods(kube, release_ns))
                and len(p) == 2
                and all(map(ready, p))
                and p
            ),
            120,
            "two ready controller replicas",
        )
        for p in pods:
            spec = p["spec"]
            assert spec["nodeName"] == node_mod.NODE_NAME
            assert spec["serviceAccountName"] == "tfjob-controller"
            manager = spec["containers"][0]
            assert manager["securityContext"]["readOnlyRootFilesystem"] is True
            assert spec["securityContext"]["runAsUser"] == 65532
        first = wait_for(lambda: leader_pod(kube, release_ns, pods), 60, "a replica leading")

        # a job to Succeeded under the deployed controller
        kube.create_tfjob(ns, make_job("first", workers=(2, "Never")))
        wait_running(kube, ns, "first", 2, timeout=60)
        finish(kube, ns, "first")
        # and one left running through what follows
        kube.create_tfjob(ns, make_job("steady", workers=(2, "Never")))
        steady = wait_running(kube, ns, "steady", 2, timeout=60)
        steady_uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in steady}

        # /metrics in the cluster: HTTPS, refused without a token, read with the role
        scraper = f"scraper-{release_ns}"
        cluster.kubectl("-n", release_ns, "create", "serviceaccount", "scraper")
        cluster.kubectl(
            "create", "clusterrolebinding", scraper,
            "--clusterrole=tfjob-controller-metrics-reader",
            f"--serviceaccount={release_ns}:scraper",
        )  # fmt: skip
        leader_ip = next(p for p in pods if p["metadata"]["name"] == first)["status"]["podIP"]
        url = f"https://{leader_ip}:8443/metrics"
        assert curl(url)[0] == 401
        status, body = curl(url, token_for(kube, "scraper", release_ns))
        assert status == 200 and "training_operator_jobs_successful_total" in body, body[:500]

        # failover: the leader's pod deleted, another replica takes the Lease and acts
        # (the standby, or the pod the Deployment starts in its place if that one is
        # quicker: both are what an operator counts on)
        kube.delete_pod(release_ns, first)

        def new_leader() -> str | None:
            who = leader_pod(kube, release_ns, controller_pods(kube, release_ns))
            return who if who and who != first else None

        try:
            wait_for(new_leader, 90, "another replica leading")
        except AssertionError as e:
            names = [p["metadata"]["name"] for p in controller_pods(kube, release_ns)]
            raise AssertionError(
                f"{e}; lease holder {holder(kube, release_ns)!r}, pods {names}"
            ) from None
        kube.create_tfjob(ns, make_job("after-failover", workers=(2, "Never")))
        wait_running(kube, ns, "after-failover", 2, timeout=60)
        finish(kube, ns, "after-failover")
        assert uids(kube, ns, "steady") == steady_uids, "the running job's pods were replaced"

        # upgrade: a new revision rolls both replicas; the running job is not touched
        helm(
            ops_tools,
            "upgrade", RELEASE, str(CHART), f"--namespace={release_ns}", "--reuse-values",
            "--set=controllerThreads=2", "--wait", "--timeout=240s",
            kubeconfig=kubeconfig,
        )  # fmt: skip
        rolled = wait_for(
            lambda: (
                (p := controller_pods(kube, release_ns))
                and len(p) == 2
                and all(map(ready, p))
                and all("--controller-threads=2" in x["spec"]["containers"][0]["args"] for x in p)
                and p
            ),
            180,
            "the upgraded replicas ready",
        )
        wait_for(lambda: leader_pod(kube, release_ns, rolled), 90, "an upgraded replica leading")
        assert uids(kube, ns, "steady") == steady_uids, "the upgrade replaced a job's pods"
        job = kube.tfjob(ns, "steady")
        assert job is not None and not any(
            c["type"] in ("Failed", "Restarting") and c["status"] == "True"
            for c in job["status"]["conditions"]
        )
        finish(kube, ns, "steady")

        # uninstall with a job running: its pods carry the tracking finalizer until then
        kube.create_tfjob(ns, make_job("left-running", workers=(2, "Never")))
        for p in wait_running(kube, ns, "left-running", 2, timeout=60):
            assert TRACKING_FINALIZER in p["metadata"]["finalizers"]
        helm(
            ops_tools, "uninstall", RELEASE, f"--namespace={release_ns}", "--wait",
            "--timeout=240s", kubeconfig=kubeconfig,
        )  # fmt: skip
        installed = False
        wait_for(lambda: not controller_pods(kube, release_ns), 90, "the controller's pods gone")
        hook_pods = kube.req("GET", f"/api/v1/namespaces/{release_ns}/pods")["items"]
        wait_for(
            lambda: not kube.req("GET", f"/api/v1/namespaces/{release_ns}/pods")["items"],
            90,
            f"every pod of {release_ns} gone (left: {[p['metadata']['name'] for p in hook_pods]})",
        )
        every_pod = kube.req("GET", "/api/v1/pods")["items"]
        held = [
            p["metadata"]["name"]
            for p in every_pod
            if TRACKING_FINALIZER in (p["metadata"].get("finalizers") or [])
        ]
        assert held == [], f"pods still carrying the tracking finalizer: {held}"
        for kind, names in (
            ("clusterroles", CLUSTER_ROLES),
            ("clusterrolebindings", CLUSTER_ROLE_BINDINGS),
        ):
            for name in names:
                path = f"/apis/rbac.authorization.k8s.io/v1/{kind}/{name}"
                assert gone(kube, path), f"{kind}/{name} left behind"
        # the CRD stays (crds.keep), and with it the TFJobs
        assert kube.req("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD}")
        assert kube.tfjob(ns, "left-running") is not None
        # every namespace deletable: the jobs' and the release's go
        for gone_ns in (ns, release_ns):
            kube.req("DELETE", f"/api/v1/namespaces/{gone_ns}")
        for gone_ns in (ns, release_ns):
            wait_for(
                lambda n=gone_ns: gone(kube, f"/api/v1/namespaces/{n}"), 120, f"{gone_ns} deleted"
            )
    finally:
        if installed:
            subprocess.run(
                [str(ops_tools / "helm"), "uninstall", RELEASE, f"--namespace={release_ns}",
                 "--wait", "--timeout=120s", f"--kubeconfig={kubeconfig}"],
                capture_output=True,
                check=False,
            )  # fmt: skip
        cluster.kubectl("label", "crd", CRD, "app.kubernetes.io/managed-by-")
        cluster.kubectl(
            "annotate", "crd", CRD, "meta.helm.sh/release-name-", "meta.helm.sh/release-namespace-"
        )
        cluster.kubectl(
            "delete", "clusterrolebinding", f"scraper-{release_ns}", "--ignore-not-found"
        )
        cluster.kubectl("delete", "namespace", release_ns, "--ignore-not-found", "--wait=false")
        controller.start()  # whatever happened: the tests after this one need it


def test_config_default_runs_in_the_cluster_with_an_overlay(
    cluster: Cluster,
    controller: ControllerProcess,
    kube: Kube,
    namespace: str,
    controller_image: str,
    tmp_path: Path,
) -> None:
    """`kubectl apply -k` of config/default under an overlay for the local cluster (the
    real node's selector and toleration, the image imported there, the apiserver's
    address; the CRD left as the cluster has it): the plain manifests run a job too."""
    ns = namespace
    wait_namespaces_gone(kube)
    controller.stop()
    cluster.kubectl("delete", "clusterrole", *CLUSTER_ROLES, "--ignore-not-found")
    cluster.kubectl("delete", "clusterrolebinding", *CLUSTER_ROLE_BINDINGS, "--ignore-not-found")
    chart = yaml.safe_load(values(cluster, tmp_path / "values.yaml").read_text())
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    deployment_patch = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "tfjob-controller", "namespace": "kubeflow"},
        "spec": {
            "template": {
                "spec": {
                    "nodeSelector": chart["nodeSelector"],
                    "tolerations": chart["tolerations"],
                    "containers": [
                        {
                            "name": "manager",
                            "image": node_mod.CONTROLLER_IMAGE,
                            "imagePullPolicy": "Never",
                            "env": chart["extraEnv"],
                            "resources": chart["resources"],
                        }
                    ],
                }
            }
        },
    }
    keep_crd = {
        "$patch": "delete",
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD},
    }
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                # kustomize takes a base by a relative path only
                "resources": [os.path.relpath(REPO / "config" / "default", overlay)],
                "patches": [
                    {"patch": yaml.safe_dump(deployment_patch)},
                    {"patch": yaml.safe_dump(keep_crd)},
                ],
            }
        )
    )
    applied = False
    try:
        cluster.kubectl("apply", "-k", str(overlay))
        applied = True
        cluster.kubectl(
            "-n", "kubeflow", "rollout", "status", "deployment/tfjob-controller", "--timeout=120s"
        )
        (pod,) = wait_for(
            lambda: (p := controller_pods(kube, "kubeflow")) and all(map(ready, p)) and p,
            60,
            "the controller ready",
        )
        assert pod["spec"]["nodeName"] == node_mod.NODE_NAME
        wait_for(lambda: leader_pod(kube, "kubeflow", [pod]), 60, "it leading")
        kube.create_tfjob(ns, make_job("plain", workers=(2, "Never")))
        wait_running(kube, ns, "plain", 2, timeout=60)
        finish(kube, ns, "plain")
    finally:
        if applied:
            # the documented uninstall: stopped, its pods let go, then the objects
            cluster.kubectl(
                "-n", "kubeflow", "scale", "deployment/tfjob-controller", "--replicas=0"
            )
            wait_for(lambda: not controller_pods(kube, "kubeflow"), 90, "the controller stopped")
            released = release_finalizers(cluster)
            assert released.returncode == 0, released.stderr
            # waited out: later tests apply config/'s namespace again
            cluster.kubectl("delete", "-k", str(overlay), "--ignore-not-found", "--timeout=180s")
        controller.start()
