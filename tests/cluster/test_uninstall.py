"""The documented uninstall never wedges a namespace (issue 29): with the controller
gone, ``tfjob-controller release-finalizers`` lets go of its tracked pods, removing its
own finalizer and nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.api.names import TRACKING_FINALIZER
from tests.cluster.kube import (
    ControllerProcess,
    Kube,
    live,
    release_finalizers,
    wait_for,
    wait_running,
)
from tests.cluster.policy_helpers import TEMPLATE, make_job
from tests.conftest import Cluster

OTHER = "other.test/keep"
OPERATOR_LABEL = {"training.kubeflow.org/operator-name": "tfjob-controller"}


def _pod(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    return kube.pod(ns, name)


def _finalizers(kube: Kube, ns: str, name: str) -> list[str] | None:
    pod = _pod(kube, ns, name)
    return None if pod is None else list(pod["metadata"].get("finalizers") or [])


@pytest.mark.local_only  # kwok ends deleted pods as a kubelet does
def test_release_finalizers_unwedges_a_namespace_and_touches_nothing_else(
    controller: ControllerProcess, kube: Kube, cluster: Cluster, namespace: str
) -> None:
    ns = namespace
    kube.create_tfjob(ns, make_job("left", chief="Never", workers=(2, "Never")))
    wait_running(kube, ns, "left", 3)
    # One of our pods carries another controller's finalizer too, and a foreign pod
    # carries our operator label with a finalizer of its own: both must keep theirs.
    kube.req(
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/left-worker-1",
        {"metadata": {"finalizers": [TRACKING_FINALIZER, OTHER]}},
        "application/merge-patch+json",
    )
    foreign = {
        "metadata": {"name": "foreign", "labels": OPERATOR_LABEL, "finalizers": [OTHER]},
        "spec": TEMPLATE["spec"],
    }
    kube.req("POST", f"/api/v1/namespaces/{ns}/pods", foreign)
    controller.stop()  # the uninstall: the controller is gone for good
    try:
        # Its namespace is deleted: the garbage collector and the namespace controller
        # delete the pods, and our finalizer holds them, Terminating.
        kube.req("DELETE", f"/api/v1/namespaces/{ns}")

        def held() -> bool:
            pods = [_pod(kube, ns, f"left-{n}") for n in ("chief-0", "worker-0", "worker-1")]
            return all(p is not None and not live(p) for p in pods)

        wait_for(held, 60, "the job's pods deleted and held by the tracking finalizer")
        dry = release_finalizers(cluster, "--namespace", ns, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert "3 of 3 tracked pods would be released" in dry.stdout
        assert _finalizers(kube, ns, "left-chief-0") == [TRACKING_FINALIZER], "a dry run"
        done = release_finalizers(cluster)  # every namespace, as the uninstall instructions run it
        assert done.returncode == 0, done.stderr
        assert f"released {ns}/left-chief-0" in done.stdout
        wait_for(lambda: _pod(kube, ns, "left-chief-0") is None, 30, "chief gone")
        wait_for(lambda: _pod(kube, ns, "left-worker-0") is None, 30, "worker 0 gone")
        # only our finalizer came off
        assert _finalizers(kube, ns, "left-worker-1") == [OTHER]
        assert _finalizers(kube, ns, "foreign") == [OTHER]
        again = release_finalizers(cluster, "--namespace", ns)
        assert "0 of 0 tracked pods released" in again.stdout, again.stdout
        for name in ("left-worker-1", "foreign"):  # the other controller's part
            kube.req(
                "PATCH",
                f"/api/v1/namespaces/{ns}/pods/{name}",
                {"metadata": {"finalizers": None}},
                "application/merge-patch+json",
            )

        def namespace_gone() -> bool:
            status, _ = cluster.api.request("GET", f"/api/v1/namespaces/{ns}")
            return status == 404

        wait_for(namespace_gone, 120, "the namespace deleted")
    finally:
        controller.start()
