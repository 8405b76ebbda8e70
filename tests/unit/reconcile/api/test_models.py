"""The TFJob models: upstream field names, lossless round-trips, frozen values."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from reconcile.api.models import ReplicaSpec, RunPolicy, TFJob, dump_tfjob, parse_tfjob
from tests import conformance

REPO = Path(__file__).resolve().parents[4]
SAMPLES = sorted((REPO / "config" / "samples").rglob("*.yaml"))


def load(path: Path) -> dict[str, Any]:
    obj = yaml.safe_load(path.read_text())
    assert isinstance(obj, dict)
    return obj


def minimal(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "job", "namespace": "ns", "uid": "u-1", "generation": 3},
        "spec": {
            "tfReplicaSpecs": {
                "Worker": {
                    "template": {"spec": {"containers": [{"name": "tensorflow", "image": "i"}]}}
                }
            },
            **spec,
        },
    }


@pytest.mark.parametrize("path", conformance.example_params())
def test_upstream_examples_round_trip(path: Path | None) -> None:
    obj = load(conformance.require(path))
    assert dump_tfjob(parse_tfjob(obj)) == obj


def test_conformance_examples_are_present() -> None:
    conformance.require(conformance.EXAMPLES_DIR)
    assert len(conformance.examples()) >= 4


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_samples_round_trip(path: Path) -> None:
    obj = load(path)
    assert dump_tfjob(parse_tfjob(obj)) == obj


def test_every_spec_field_round_trips_with_upstream_names() -> None:
    obj = minimal(
        runPolicy={
            "cleanPodPolicy": "All",
            "ttlSecondsAfterFinished": 60,
            "activeDeadlineSeconds": 3600,
            "backoffLimit": 4,
            "schedulingPolicy": {
                "minAvailable": 3,
                "queue": "q",
                "minResources": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1},
                "priorityClass": "high",
                "scheduleTimeoutSeconds": 30,
            },
            "suspend": True,
            "managedBy": "kueue.x-k8s.io/multikueue",
        },
        successPolicy="AllWorkers",
        enableDynamicWorker=True,
    )
    obj["spec"]["tfReplicaSpecs"]["Worker"].update(replicas=3, restartPolicy="ExitCode")
    job = parse_tfjob(obj)
    assert dump_tfjob(job) == obj
    rp = job.spec.run_policy
    assert rp is not None and rp.scheduling_policy is not None
    assert rp.scheduling_policy.min_resources == {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1}
    assert (rp.managed_by, rp.backoff_limit, rp.suspend) == ("kueue.x-k8s.io/multikueue", 4, True)
    assert job.spec.tf_replica_specs["Worker"].restart_policy == "ExitCode"


def test_pod_template_is_kept_verbatim() -> None:
    # Fields our schema knows nothing about, including ones from future Pod APIs.
    template = {
        "metadata": {"labels": {"a": "b"}, "annotations": {"x": "y"}, "somethingNew": 1},
        "spec": {
            "containers": [
                {
                    "name": "tensorflow",
                    "image": "i",
                    "env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
                    "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}],
                    "resources": None,
                }
            ],
            "initContainers": [{"name": "init", "image": "i", "restartPolicy": "Always"}],
            "schedulingGates": [{"name": "g"}],
            "hostUsers": False,
            "futureField": {"nested": [1, 2, {"deep": None}]},
        },
    }
    obj = minimal()
    obj["spec"]["tfReplicaSpecs"]["Worker"]["template"] = copy.deepcopy(template)
    job = parse_tfjob(obj)
    assert job.spec.tf_replica_specs["Worker"].template == template
    assert dump_tfjob(job)["spec"]["tfReplicaSpecs"]["Worker"]["template"] == template


def test_status_round_trips() -> None:
    status = {
        "conditions": [
            {
                "type": "Created",
                "status": "True",
                "reason": "TFJobCreated",
                "message": "TFJob job is created.",
                "lastUpdateTime": "2024-05-01T10:00:00Z",
                "lastTransitionTime": "2024-05-01T10:00:00Z",
            }
        ],
        "replicaStatuses": {"Worker": {"active": 1}},
        "startTime": "2024-05-01T10:00:01Z",
    }
    obj = {**minimal(), "status": status}
    job = parse_tfjob(obj)
    assert job.status is not None and job.status.conditions is not None
    assert job.status.conditions[0].type == "Created"
    assert dump_tfjob(job)["status"] == status


def test_accessors() -> None:
    job = parse_tfjob(minimal())
    assert (job.name, job.namespace, job.uid, job.generation) == ("job", "ns", "u-1", 3)
    assert list(job.replica_specs) == ["Worker"]


def test_models_are_frozen() -> None:
    job = parse_tfjob(minimal())
    with pytest.raises(pydantic.ValidationError):
        job.spec.tf_replica_specs["Worker"].replicas = 5  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        job.spec = job.spec  # type: ignore[misc]


def test_populate_by_python_name() -> None:
    rp = RunPolicy(clean_pod_policy="All", backoff_limit=2)
    assert rp.model_dump(by_alias=True, exclude_none=True) == {
        "cleanPodPolicy": "All",
        "backoffLimit": 2,
    }
    assert ReplicaSpec(template={}).replicas is None


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda o: o["spec"].pop("tfReplicaSpecs"), id="no-replica-specs"),
        pytest.param(lambda o: o.pop("spec"), id="no-spec"),
        pytest.param(
            lambda o: o["spec"]["tfReplicaSpecs"]["Worker"].update(replicas="2"), id="str-replicas"
        ),
        pytest.param(
            lambda o: o["spec"]["tfReplicaSpecs"]["Worker"].update(replicas=True),
            id="bool-replicas",
        ),
        pytest.param(
            lambda o: o["spec"]["tfReplicaSpecs"]["Worker"].pop("template"), id="no-template"
        ),
        pytest.param(lambda o: o["spec"].update(runPolicy=[]), id="run-policy-list"),
    ],
)
def test_malformed_objects_do_not_parse(mutate: Any) -> None:
    obj = minimal()
    mutate(obj)
    with pytest.raises(pydantic.ValidationError):
        parse_tfjob(obj)


def test_parse_does_not_copy_or_mutate_input() -> None:
    obj = minimal()
    before = copy.deepcopy(obj)
    dump_tfjob(parse_tfjob(obj))
    assert obj == before
    assert isinstance(parse_tfjob(obj), TFJob)
