from __future__ import annotations

import pytest

from reconcile.api.labels import (
    JOB_ROLE_LABEL,
    coordinator,
    is_master_role,
    job_labels,
    pod_labels,
    replica_index_of,
    replica_labels,
    replica_name,
    replica_type_of,
)
from reconcile.api.models import ReplicaSpec

P = "training.kubeflow.org/"


@pytest.mark.parametrize(
    ("job", "rtype", "index", "want"),
    [
        pytest.param("mnist", "Worker", 0, "mnist-worker-0", id="worker"),
        pytest.param("mnist", "PS", 3, "mnist-ps-3", id="ps-lowercased"),
        pytest.param("mnist", "Chief", 0, "mnist-chief-0", id="chief"),
        pytest.param("a/b", "Worker", 1, "a-b-worker-1", id="slash-dashed"),
    ],
)
def test_replica_name(job: str, rtype: str, index: int, want: str) -> None:
    assert replica_name(job, rtype, index) == want


def test_replica_labels_exact() -> None:
    assert replica_labels("mnist", "PS", 2) == {
        P + "operator-name": "tfjob-controller",
        P + "job-name": "mnist",
        P + "replica-type": "ps",
        P + "replica-index": "2",
    }
    assert job_labels("a/b", "other") == {P + "operator-name": "other", P + "job-name": "a-b"}


@pytest.mark.parametrize(
    ("rtype", "index", "counts", "want"),
    [
        pytest.param("Chief", 0, {"Chief": 1, "Worker": 2}, True, id="chief"),
        pytest.param("Master", 0, {"Master": 1, "Worker": 2}, True, id="master"),
        pytest.param("Worker", 0, {"Chief": 1, "Worker": 2}, False, id="worker0-with-chief"),
        pytest.param("Worker", 0, {"PS": 1, "Worker": 2}, True, id="worker0-without-chief"),
        pytest.param("Worker", 0, {"Chief": 0, "Worker": 2}, True, id="worker0-0-replica-chief"),
        pytest.param("Worker", 1, {"Worker": 2}, False, id="worker1"),
        pytest.param("PS", 0, {"PS": 1, "Worker": 1}, False, id="ps"),
        pytest.param("Evaluator", 0, {"Evaluator": 1, "Worker": 1}, False, id="evaluator"),
    ],
)
def test_is_master_role(rtype: str, index: int, counts: dict[str, int], want: bool) -> None:
    specs = {rt: ReplicaSpec(replicas=n, template={}) for rt, n in counts.items()}
    assert is_master_role(rtype, index, specs) is want
    assert (coordinator(specs) is not None) is any(
        counts.get(rt, 0) > 0 for rt in ("Chief", "Master")
    )


def test_controller_labels_override_template_labels() -> None:
    labels = pod_labels(
        "j",
        "Worker",
        0,
        master_role=True,
        template_labels={P + "job-name": "evil", P + "replica-index": "9", "app": "x"},
    )
    assert labels[P + "job-name"] == "j"
    assert labels[P + "replica-index"] == "0"
    assert labels["app"] == "x"
    assert labels[JOB_ROLE_LABEL] == "master"
    assert JOB_ROLE_LABEL not in pod_labels("j", "Worker", 1, master_role=False)


@pytest.mark.parametrize(
    ("labels", "rtype", "index"),
    [
        pytest.param(
            {P + "replica-type": "worker", P + "replica-index": "3"}, "worker", 3, id="ok"
        ),
        pytest.param({}, None, None, id="none"),
        pytest.param({P + "replica-index": "-1"}, None, None, id="negative"),
        pytest.param({P + "replica-index": "x"}, None, None, id="garbage"),
        pytest.param({P + "replica-index": "²"}, None, None, id="unicode-digit"),
    ],
)
def test_replica_label_parsing(
    labels: dict[str, str], rtype: str | None, index: int | None
) -> None:
    obj = {"metadata": {"labels": labels}}
    assert replica_type_of(obj) == rtype
    assert replica_index_of(obj) == index
