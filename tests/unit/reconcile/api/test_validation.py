"""Controller-side validation: one case per rule, plus parse errors as field errors."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconcile.api.defaults import apply_defaults
from reconcile.api.models import parse_tfjob
from reconcile.api.validation import (
    FieldError,
    check,
    format_errors,
    validate,
    validate_update,
)
from tests import conformance
from tests.unit.reconcile.api.test_models import SAMPLES

Obj = dict[str, Any]


def replica(**fields: Any) -> Obj:
    return {
        "template": {"spec": {"containers": [{"name": "tensorflow", "image": "i"}]}},
        **fields,
    }


def valid() -> Obj:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "job-1"},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "None"},
            "tfReplicaSpecs": {"Chief": replica(), "PS": replica(), "Worker": replica(replicas=2)},
        },
    }


def specs(o: Obj) -> Obj:
    out: Obj = o["spec"]["tfReplicaSpecs"]
    return out


def containers(o: Obj, rtype: str = "Worker") -> list[Obj]:
    out: list[Obj] = specs(o)[rtype]["template"]["spec"]["containers"]
    return out


def errors_for(mutate: Callable[[Obj], object]) -> list[FieldError]:
    obj = valid()
    mutate(obj)
    job, errors = check(obj)
    assert job is not None, errors
    return errors


@pytest.mark.parametrize(
    ("mutate", "path", "message"),
    [
        pytest.param(
            lambda o: o["metadata"].update(name="1job"),
            "metadata.name",
            "DNS-1035",
            id="name-digit",
        ),
        pytest.param(
            lambda o: o["metadata"].update(name="job.dot"),
            "metadata.name",
            "DNS-1035",
            id="name-dot",
        ),
        pytest.param(
            lambda o: o["metadata"].update(name="a" * 64),
            "metadata.name",
            "DNS-1035",
            id="name-long",
        ),
        pytest.param(
            lambda o: o["metadata"].pop("name"), "metadata.name", "Required", id="no-name"
        ),
        pytest.param(
            lambda o: o["metadata"].update(name="a" * 55),
            "metadata.name",
            f"is too long for its replicas: pod and service '{'a' * 55}-worker-1' would have 64",
            id="child-name-too-long",
        ),
        pytest.param(
            lambda o: specs(o)["Worker"].update(replicas=999),
            "spec.tfReplicaSpecs",
            "asks for 1001 replicas: must not ask for more than 1000 in all",
            id="too-many-replicas",
        ),
        pytest.param(
            lambda o: o["spec"]["runPolicy"].update(managedBy="someone/else"),
            "spec.runPolicy.managedBy",
            "Unsupported value",
            id="managed-by",
        ),
        pytest.param(
            lambda o: o["spec"]["runPolicy"].update(managedBy=""),
            "spec.runPolicy.managedBy",
            "Unsupported value",
            id="managed-by-empty",
        ),
        pytest.param(
            lambda o: specs(o).update(Launcher=replica()),
            "spec.tfReplicaSpecs[Launcher]",
            "unknown replica type",
            id="unknown-type",
        ),
        pytest.param(
            lambda o: specs(o).update(worker=replica()),
            "spec.tfReplicaSpecs[worker]",
            "duplicates replica type",
            id="case-duplicate",
        ),
        pytest.param(
            lambda o: specs(o).update(Master=replica()),
            "spec.tfReplicaSpecs",
            "more than 1 Chief or Master",
            id="chief-and-master",
        ),
        pytest.param(
            lambda o: specs(o).update(master=replica()),
            "spec.tfReplicaSpecs",
            "more than 1 Chief or Master",
            id="chief-and-lowercase-master",
        ),
        pytest.param(
            lambda o: specs(o)["Chief"].update(replicas=2),
            "spec.tfReplicaSpecs[Chief].replicas",
            "0 or 1",
            id="chief-replicas",
        ),
        pytest.param(
            lambda o: specs(o).update(Master=specs(o).pop("Chief") | {"replicas": 3}),
            "spec.tfReplicaSpecs[Master].replicas",
            "0 or 1",
            id="master-replicas",
        ),
        pytest.param(
            lambda o: specs(o)["Worker"].update(replicas=-1),
            "spec.tfReplicaSpecs[Worker].replicas",
            "greater than or equal to 0",
            id="negative-replicas",
        ),
        pytest.param(
            lambda o: specs(o)["Worker"].update(restartPolicy="Sometimes"),
            "spec.tfReplicaSpecs[Worker].restartPolicy",
            "Unsupported value",
            id="restart-policy",
        ),
        pytest.param(
            lambda o: specs(o)["Worker"]["template"]["spec"].update(containers=[]),
            "spec.tfReplicaSpecs[Worker].template.spec.containers",
            "must be specified",
            id="no-containers",
        ),
        pytest.param(
            lambda o: specs(o)["Worker"].update(template={}),
            "spec.tfReplicaSpecs[Worker].template.spec",
            "Required",
            id="no-pod-spec",
        ),
        *(
            pytest.param(
                lambda o, f=field, v=value: containers(o)[0].update({f: v}),
                f"spec.tfReplicaSpecs[Worker].template.spec.containers[0].{where}",
                message,
                id=f"{field}-{value!r}",
            )
            for field, value, where, message in [
                ("ports", 5, "ports", "must be a list, not int"),
                ("env", 5, "env", "must be a list, not int"),
                ("ports", [5], "ports[0]", "must be an object"),
                ("env", ["A=1"], "env[0]", "must be an object"),
                ("ports", [{"containerPort": "80"}], "ports[0].containerPort", "must be int"),
                ("ports", [{"name": "tfjob-port"}], "ports[0].containerPort", "must be int"),
                ("env", [{"name": 5}], "env[0].name", "must be str"),
            ]
        ),
        pytest.param(
            lambda o: containers(o)[0].pop("image"),
            "spec.tfReplicaSpecs[Worker].template.spec.containers[0].image",
            "must be required",
            id="no-image",
        ),
        pytest.param(
            lambda o: containers(o)[0].update(image=""),
            "spec.tfReplicaSpecs[Worker].template.spec.containers[0].image",
            "must be required",
            id="empty-image",
        ),
        pytest.param(
            lambda o: containers(o).append({"name": "sidecar"}),
            "spec.tfReplicaSpecs[Worker].template.spec.containers[1].image",
            "must be required",
            id="sidecar-without-image",
        ),
        pytest.param(
            lambda o: containers(o)[0].update(name="tf"),
            "spec.tfReplicaSpecs[Worker].template.spec.containers",
            "with name tensorflow",
            id="no-tensorflow-container",
        ),
        pytest.param(
            lambda o: containers(o).append({"image": "s"}),
            "spec.tfReplicaSpecs[Worker].template.spec.containers[1].name",
            "Required",
            id="container-without-name",
        ),
        pytest.param(
            lambda o: containers(o).append({"name": "tensorflow", "image": "j"}),
            "spec.tfReplicaSpecs[Worker].template.spec.containers[1].name",
            "Duplicate",
            id="duplicate-container-name",
        ),
        pytest.param(
            lambda o: containers(o).extend({"name": f"c{i}", "image": "i"} for i in range(64)),
            "spec.tfReplicaSpecs[Worker].template.spec.containers",
            "at most 64",
            id="too-many-containers",
        ),
        pytest.param(
            lambda o: containers(o).append({"name": "c" * 64, "image": "i"}),
            "spec.tfReplicaSpecs[Worker].template.spec.containers[1].name",
            "at most 63",
            id="long-container-name",
        ),
        pytest.param(
            lambda o: o["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"][
                "containers"
            ].append("not-a-container"),
            "spec.tfReplicaSpecs[Worker].template.spec.containers[1]",
            "must be an object",
            id="container-not-object",
        ),
        pytest.param(
            lambda o: specs(o)["Worker"]["template"].update(spec={"containers": "tensorflow"}),
            "spec.tfReplicaSpecs[Worker].template.spec.containers",
            "must be specified",
            id="containers-not-list",
        ),
    ],
)
def test_each_rule(mutate: Callable[[Obj], object], path: str, message: str) -> None:
    errors = errors_for(mutate)
    assert [e.path for e in errors] == [path], errors
    assert message in errors[0].message


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda o: None, id="as-is"),
        pytest.param(
            lambda o: specs(o).update(Chief=specs(o)["Chief"] | {"replicas": 0}), id="chief-0"
        ),
        pytest.param(lambda o: specs(o).update(Master=specs(o).pop("Chief")), id="master"),
        pytest.param(lambda o: specs(o).update(evaluator=replica()), id="lowercase-evaluator"),
        pytest.param(lambda o: specs(o)["Worker"].update(replicas=0), id="zero-workers"),
        pytest.param(lambda o: specs(o)["Worker"].update(restartPolicy=""), id="empty-restart"),
        pytest.param(
            lambda o: o["spec"]["runPolicy"].update(managedBy="kubeflow.org/training-operator"),
            id="managed-by-us",
        ),
        pytest.param(
            lambda o: o["spec"]["runPolicy"].update(managedBy="kueue.x-k8s.io/multikueue"),
            id="managed-by-multikueue",
        ),
        # "-worker-1" makes the longest child name 63 characters
        pytest.param(lambda o: o["metadata"].update(name="a" * 54), id="name-54-fits"),
        pytest.param(lambda o: specs(o)["Worker"].update(replicas=998), id="1000-replicas"),
        pytest.param(
            lambda o: containers(o).insert(0, {"name": "sidecar", "image": "s"}),
            id="tensorflow-not-first",
        ),
        pytest.param(lambda o: o["spec"].pop("runPolicy"), id="no-run-policy"),
    ],
)
def test_valid_variants(mutate: Callable[[Obj], object]) -> None:
    assert errors_for(mutate) == []


@pytest.mark.parametrize("path", [*conformance.examples(), *SAMPLES], ids=lambda p: p.name)
def test_examples_and_samples_are_valid(path: Path) -> None:
    job, errors = check(yaml.safe_load(path.read_text()))
    assert job is not None and errors == []
    assert validate(apply_defaults(job)) == []


@pytest.mark.parametrize(
    ("obj", "paths"),
    [
        pytest.param([], [""], id="not-an-object"),
        pytest.param({"metadata": {"name": "j"}}, ["spec"], id="no-spec"),
        pytest.param(
            {"metadata": {"name": "j"}, "spec": {}}, ["spec.tfReplicaSpecs"], id="no-specs"
        ),
        pytest.param(
            {"metadata": {"name": "j"}, "spec": {"tfReplicaSpecs": {"Worker": None}}},
            ["spec.tfReplicaSpecs[Worker]"],
            id="null-replica",
        ),
        pytest.param(
            {"metadata": {"name": "j"}, "spec": {"tfReplicaSpecs": {"Worker": {"replicas": "2"}}}},
            ["spec.tfReplicaSpecs[Worker].replicas", "spec.tfReplicaSpecs[Worker].template"],
            id="bad-replicas-and-no-template",
        ),
        pytest.param(
            {
                "metadata": {"name": "j"},
                "spec": {
                    "runPolicy": {"schedulingPolicy": {"minResources": {"cpu": 1.5}}},
                    "tfReplicaSpecs": {},
                },
            },
            ["spec.runPolicy.schedulingPolicy.minResources[cpu]"],
            id="bad-quantity",
        ),
        pytest.param(
            {"metadata": None, "spec": {"tfReplicaSpecs": {}}}, ["metadata"], id="null-metadata"
        ),
    ],
)
def test_parse_errors_become_field_errors(obj: Any, paths: list[str]) -> None:
    job, errors = check(obj)
    assert job is None
    # pydantic may report a union member more than once; the paths are what matter
    assert sorted({e.path for e in errors}) == sorted(paths), errors


@pytest.mark.parametrize(
    "garbage",
    [
        None,
        "tfjob",
        {"spec": None},
        {"spec": {"tfReplicaSpecs": []}},
        {"spec": {"tfReplicaSpecs": {"Worker": {"template": []}}}},
        {"spec": {"tfReplicaSpecs": {"Worker": {"template": {"spec": []}}}}},
        {"spec": {"tfReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [None]}}}}}},
        {"metadata": {"name": 5}, "spec": {"tfReplicaSpecs": {}}},
    ],
)
def test_never_raises(garbage: Any) -> None:
    job, errors = check(garbage)
    assert errors, (job, errors)


def test_error_formatting() -> None:
    errors = [FieldError("spec.x", "bad"), FieldError("", "worse")]
    assert [str(e) for e in errors] == ["spec.x: bad", "worse"]
    assert format_errors(errors) == "TFJob is invalid: spec.x: bad; worse"


def test_validation_is_the_same_after_defaulting() -> None:
    obj = valid()
    specs(obj)["worker"] = specs(obj).pop("Worker")
    job = parse_tfjob(obj)
    assert validate(job) == [] and validate(apply_defaults(job)) == []


def _update(old_rp: Obj, new_rp: Obj) -> list[str]:
    old, new = valid(), valid()
    old["spec"]["runPolicy"], new["spec"]["runPolicy"] = old_rp, new_rp
    return [e.path for e in validate_update(parse_tfjob(new), parse_tfjob(old))]


MB = "kueue.x-k8s.io/multikueue"


@pytest.mark.parametrize(
    ("old_rp", "new_rp", "paths"),
    [
        pytest.param({"managedBy": MB}, {"managedBy": MB}, [], id="managed-by-same"),
        pytest.param(
            {"managedBy": MB},
            {"managedBy": "kubeflow.org/training-operator"},
            ["spec.runPolicy.managedBy"],
            id="managed-by-changed",
        ),
        pytest.param({}, {"managedBy": MB}, ["spec.runPolicy.managedBy"], id="managed-by-set"),
        pytest.param({"managedBy": MB}, {}, ["spec.runPolicy.managedBy"], id="managed-by-unset"),
        pytest.param(
            {"schedulingPolicy": {"queue": "a"}},
            {"schedulingPolicy": {"queue": "b"}},
            ["spec.runPolicy.schedulingPolicy.queue"],
            id="queue-changed",
        ),
        pytest.param({}, {"schedulingPolicy": {"queue": "a"}}, [], id="queue-set"),
        pytest.param(
            {"schedulingPolicy": {"queue": "a", "minAvailable": 1}},
            {"schedulingPolicy": {"queue": "a", "minAvailable": 2}},
            [],
            id="other-fields-mutable",
        ),
    ],
)
def test_update_rules(old_rp: Obj, new_rp: Obj, paths: list[str]) -> None:
    assert _update(old_rp, new_rp) == paths


def test_check_does_not_mutate_input() -> None:
    obj = valid()
    containers(obj)[0].pop("image")
    before = copy.deepcopy(obj)
    check(obj)
    assert obj == before
