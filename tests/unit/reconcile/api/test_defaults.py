"""Defaulting: one case per upstream rule (SetDefaults_TFJob) and per schema default."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from reconcile.api.defaults import apply_defaults, canonical_replica_type, default_container_index
from reconcile.api.models import dump_tfjob, parse_tfjob

TF = {"name": "tensorflow", "image": "i"}
PORT = {"name": "tfjob-port", "containerPort": 2222}


def replica(*containers: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"template": {"spec": {"containers": list(containers or [dict(TF)])}}, **fields}


def job(specs: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "j"},
        "spec": {"tfReplicaSpecs": specs or {"Worker": replica()}, **spec},
    }


def defaulted(obj: dict[str, Any]) -> dict[str, Any]:
    return dump_tfjob(apply_defaults(parse_tfjob(obj)))


def test_fully_defaulted_job() -> None:
    assert defaulted(job())["spec"] == {
        "runPolicy": {"cleanPodPolicy": "None", "suspend": False},
        "successPolicy": "",
        "enableDynamicWorker": False,
        "tfReplicaSpecs": {
            "Worker": {
                "replicas": 1,
                "restartPolicy": "Never",
                "template": {"spec": {"containers": [{**TF, "ports": [PORT]}]}},
            }
        },
    }


@pytest.mark.parametrize(
    ("run_policy", "expected"),
    [
        pytest.param(None, {"cleanPodPolicy": "None", "suspend": False}, id="absent"),
        pytest.param({}, {"cleanPodPolicy": "None", "suspend": False}, id="empty"),
        pytest.param(
            {"cleanPodPolicy": "All", "suspend": True},
            {"cleanPodPolicy": "All", "suspend": True},
            id="kept",
        ),
        # "" is upstream's Undefined; only nil is defaulted.
        pytest.param(
            {"cleanPodPolicy": ""}, {"cleanPodPolicy": "", "suspend": False}, id="empty-str"
        ),
        pytest.param(
            {"backoffLimit": 2, "managedBy": "kubeflow.org/training-operator"},
            {
                "backoffLimit": 2,
                "managedBy": "kubeflow.org/training-operator",
                "cleanPodPolicy": "None",
                "suspend": False,
            },
            id="others-untouched",
        ),
    ],
)
def test_run_policy(run_policy: dict[str, Any] | None, expected: dict[str, Any]) -> None:
    obj = job() if run_policy is None else job(runPolicy=run_policy)
    assert defaulted(obj)["spec"]["runPolicy"] == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [(None, ""), ("", ""), ("AllWorkers", "AllWorkers")],
)
def test_success_policy(given: str | None, expected: str) -> None:
    obj = job() if given is None else job(successPolicy=given)
    assert defaulted(obj)["spec"]["successPolicy"] == expected


@pytest.mark.parametrize(("given", "expected"), [(None, False), (True, True)])
def test_enable_dynamic_worker(given: bool | None, expected: bool) -> None:
    obj = job() if given is None else job(enableDynamicWorker=given)
    assert defaulted(obj)["spec"]["enableDynamicWorker"] is expected


@pytest.mark.parametrize(
    ("key", "canonical"),
    [
        ("worker", "Worker"),
        ("WORKER", "Worker"),
        ("ps", "PS"),
        ("Ps", "PS"),
        ("chief", "Chief"),
        ("master", "Master"),
        ("evaluator", "Evaluator"),
        ("Worker", "Worker"),
        ("Launcher", "Launcher"),  # unknown types are left alone (validation rejects them)
    ],
)
def test_replica_type_keys_are_recased(key: str, canonical: str) -> None:
    assert canonical_replica_type(key) == canonical
    assert list(defaulted(job({key: replica()}))["spec"]["tfReplicaSpecs"]) == [canonical]


def test_master_is_not_converted_to_chief() -> None:
    assert list(defaulted(job({"master": replica()}))["spec"]["tfReplicaSpecs"]) == ["Master"]


def test_case_duplicate_keeps_exact_key_deterministically() -> None:
    obj = job({"worker": replica(replicas=1), "Worker": replica(replicas=2), "ps": replica()})
    specs = defaulted(obj)["spec"]["tfReplicaSpecs"]
    assert list(specs) == ["Worker", "PS"]
    assert specs["Worker"]["replicas"] == 2


@pytest.mark.parametrize(("given", "expected"), [(None, 1), (0, 0), (3, 3)])
def test_replicas(given: int | None, expected: int) -> None:
    fields = {} if given is None else {"replicas": given}
    rs = defaulted(job({"Worker": replica(**fields)}))["spec"]["tfReplicaSpecs"]["Worker"]
    assert rs["replicas"] == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [(None, "Never"), ("", "Never"), ("OnFailure", "OnFailure"), ("ExitCode", "ExitCode")],
)
def test_restart_policy(given: str | None, expected: str) -> None:
    fields = {} if given is None else {"restartPolicy": given}
    rs = defaulted(job({"Worker": replica(**fields)}))["spec"]["tfReplicaSpecs"]["Worker"]
    assert rs["restartPolicy"] == expected


def containers_after(*containers: dict[str, Any]) -> list[dict[str, Any]]:
    rs = defaulted(job({"Worker": replica(*containers)}))["spec"]["tfReplicaSpecs"]["Worker"]
    out: list[dict[str, Any]] = rs["template"]["spec"]["containers"]
    return out


def test_port_goes_to_the_tensorflow_container() -> None:
    side = {"name": "sidecar", "image": "s"}
    assert containers_after(side, dict(TF)) == [side, {**TF, "ports": [PORT]}]


def test_port_goes_to_container_zero_without_a_tensorflow_container() -> None:
    a, b = {"name": "a", "image": "i"}, {"name": "b", "image": "i"}
    assert containers_after(a, b) == [{**a, "ports": [PORT]}, b]


def test_port_is_appended_to_existing_ports() -> None:
    metrics = {"name": "metrics", "containerPort": 9090}
    assert containers_after({**TF, "ports": [metrics]}) == [{**TF, "ports": [metrics, PORT]}]


def test_existing_tfjob_port_is_kept() -> None:
    custom = {"name": "tfjob-port", "containerPort": 3333}
    assert containers_after({**TF, "ports": [custom]}) == [{**TF, "ports": [custom]}]


def test_port_only_on_default_container_even_if_another_has_it() -> None:
    # Upstream checks only the default container for an existing tfjob-port.
    side = {"name": "sidecar", "image": "s", "ports": [PORT]}
    assert containers_after(side, dict(TF)) == [side, {**TF, "ports": [PORT]}]


def test_malformed_templates_are_left_for_validation() -> None:
    template: dict[str, Any]
    for template in (
        {},
        {"spec": None},
        {"spec": {"containers": []}},
        {"spec": {"containers": [1]}},
    ):
        obj = job({"Worker": {"template": template}})
        rs = defaulted(obj)["spec"]["tfReplicaSpecs"]["Worker"]
        assert rs["template"] == template


def test_default_container_index() -> None:
    assert default_container_index([{"name": "a"}, {"name": "tensorflow"}]) == 1
    assert default_container_index([{"name": "a"}]) == 0
    assert default_container_index(["junk", {"name": "tensorflow"}]) == 1


def test_pure_input_and_shared_template_untouched() -> None:
    obj = job({"Worker": replica(), "PS": replica(replicas=1)}, runPolicy={})
    before = copy.deepcopy(obj)
    parsed = parse_tfjob(obj)
    parsed_before = dump_tfjob(parsed)
    apply_defaults(parsed)
    assert obj == before
    assert dump_tfjob(parsed) == parsed_before


def test_idempotent() -> None:
    once = apply_defaults(parse_tfjob(job({"worker": replica(), "ps": replica()})))
    assert dump_tfjob(apply_defaults(once)) == dump_tfjob(once)
