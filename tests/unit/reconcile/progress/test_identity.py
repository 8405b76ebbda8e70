"""Whose report it is: only a live pod of the job, as the cache has it."""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.progress.identity import Refusal, audience, reporter_of
from reconcile.progress.records import Reporter

JOB: dict[str, Any] = {
    "metadata": {"namespace": "ns", "name": "mnist", "uid": "job-uid"},
    "spec": {"tfReplicaSpecs": {"Chief": {}, "Worker": {}}},
}


def pod(name: str = "mnist-worker-1", uid: str = "pod-uid", **meta: Any) -> dict[str, Any]:
    m: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": uid,
        "labels": {
            "training.kubeflow.org/replica-type": "worker",
            "training.kubeflow.org/replica-index": "1",
        },
        "ownerReferences": [{"kind": "TFJob", "uid": "job-uid", "controller": True}],
    }
    m.update(meta)
    return {"metadata": m, "spec": {"nodeName": "node-a"}}


def check(p: dict[str, Any] | None, **kw: Any) -> Reporter | Refusal:
    args = {"pod_name": "mnist-worker-1", "pod_uid": "pod-uid", "service_account_namespace": "ns"}
    return reporter_of(JOB, p, **{**args, **kw})


def test_audience_names_the_job() -> None:
    assert audience("ns", "mnist") == "tfjob.kubeflow.org/ns/mnist"


def test_a_pod_of_the_job_is_its_replica() -> None:
    assert check(pod()) == Reporter("Worker", 1, "mnist-worker-1", "pod-uid", "node-a")


@pytest.mark.parametrize(
    ("p", "kw", "words"),
    [
        (pod(), {"service_account_namespace": "other"}, "of namespace 'other'"),
        (pod(), {"pod_name": "", "pod_uid": ""}, "not bound to a pod"),
        (None, {}, "or is gone"),
        (pod(uid="new-uid"), {}, "is gone: its name is another pod's now"),
        (pod(ownerReferences=[{"uid": "other-job", "controller": True}]), {}, "not a pod of"),
        (pod(ownerReferences=[{"uid": "job-uid"}]), {}, "not a pod of"),  # not the controller
        (pod(labels={}), {}, "no replica type"),
        # a pod on its way out: its replacement's reports count (issue: a live pod)
        (pod(deletionTimestamp="2026-01-01T00:00:00Z"), {}, "is being deleted"),
        (
            pod(
                labels={
                    "training.kubeflow.org/replica-type": "ps",
                    "training.kubeflow.org/replica-index": "0",
                }
            ),
            {},
            "no replica type",
        ),
    ],
)
def test_anything_else_is_forbidden(p: Any, kw: dict[str, Any], words: str) -> None:
    got = check(p, **kw)
    assert isinstance(got, Refusal) and got.status == 403
    assert words in got.message
