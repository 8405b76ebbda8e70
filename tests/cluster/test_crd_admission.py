"""The TFJob CRD against a real apiserver: what admission accepts, rejects and defaults.

Covers every upstream example and our samples, SDK-built jobs and replica-type mixes
(accepted, defaults visible on read-back, readable by the kubeflow-training SDK),
one rejected object per admission rule (the message must name the field), the
update rules, the status subresource, and that the upstream v1.9.0 CRD's schema
accepts our samples too (installed under a scratch group so ours stays in place).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconcile.api.models import dump_tfjob, parse_tfjob
from reconcile.api.names import MANAGED_BY_MULTIKUEUE
from reconcile.api.status_types import JobCondition, JobStatus, ReplicaStatus
from tests import conformance
from tests.conftest import Cluster
from tests.unit.reconcile.api.test_models import SAMPLES

pytestmark = pytest.mark.cluster

Obj = dict[str, Any]
TFJOBS = "/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


# --- object builders ---------------------------------------------------------------


def container(name: str = "tensorflow", image: str = "kubeflow/tf-dist-mnist-test:latest") -> Obj:
    return {"name": name, "image": image}


def replica(replicas: int | None = None, **fields: Any) -> Obj:
    out: Obj = {"template": {"spec": {"containers": [container()]}}, **fields}
    if replicas is not None:
        out["replicas"] = replicas
    return out


def tfjob(specs: Obj | None = None, name: str = "job", **spec: Any) -> Obj:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"tfReplicaSpecs": specs if specs is not None else {"Worker": replica()}, **spec},
    }


def from_file(path: Path) -> Obj:
    obj: Obj = yaml.safe_load(path.read_text())
    obj["metadata"].pop("namespace", None)  # tests own the namespace
    return obj


def sdk_jobs() -> list[Any]:
    """Jobs built the way kubeflow-training 1.9 builds them (create_job and its e2e test)."""
    try:
        from kubeflow.training import models
        from kubeflow.training.api_client import ApiClient
        from kubeflow.training.utils import utils
    except ImportError:
        return [pytest.param(None, id="sdk-missing", marks=pytest.mark.skip("no SDK"))]
    sanitize = ApiClient().sanitize_for_serialization
    container_spec = utils.get_container_spec(
        name="tensorflow",
        base_image="kubeflow/tf-mnist-with-summaries:latest",
        command=["python", "/var/tf_mnist/mnist_with_summaries.py"],
        resources={"cpu": 1, "memory": "2Gi"},
    )
    pod = utils.get_pod_template_spec(containers=[container_spec])
    templated = utils.get_tfjob_template(
        name="sdk-template",
        namespace="ignored",
        pod_template_spec=pod,
        num_workers=2,
        num_chief_replicas=1,
        num_ps_replicas=1,
    )
    e2e = models.KubeflowOrgV1TFJob(
        api_version="kubeflow.org/v1",
        kind="TFJob",
        metadata=models.V1ObjectMeta(name="tfjob-mnist-ci-test"),
        spec=models.KubeflowOrgV1TFJobSpec(
            run_policy=models.KubeflowOrgV1RunPolicy(
                clean_pod_policy="None",
                scheduling_policy=models.KubeflowOrgV1SchedulingPolicy(min_available=10),
            ),
            tf_replica_specs={
                "Worker": models.KubeflowOrgV1ReplicaSpec(
                    replicas=1,
                    restart_policy="Never",
                    template=models.V1PodTemplateSpec(
                        metadata=models.V1ObjectMeta(
                            annotations={"sidecar.istio.io/inject": "false"}
                        ),
                        spec=models.V1PodSpec(
                            containers=[
                                models.V1Container(
                                    name="tensorflow",
                                    image="kubeflow/tf-mnist-with-summaries:1.0",
                                    command=["python", "/var/tf_mnist/mnist_with_summaries.py"],
                                    resources=models.V1ResourceRequirements(
                                        limits={"memory": "4Gi", "cpu": "1.6"}
                                    ),
                                )
                            ]
                        ),
                    ),
                )
            },
        ),
    )
    out = []
    for job, name in ((templated, "sdk-template"), (e2e, "sdk-e2e")):
        obj = sanitize(job)
        obj["metadata"].pop("namespace", None)
        out.append(pytest.param(obj, id=name))
    return out


VALID_MIXES = [
    pytest.param(tfjob(), id="minimal"),
    pytest.param(
        tfjob(
            {"Chief": replica(1), "PS": replica(2), "Worker": replica(4), "Evaluator": replica(1)}
        ),
        id="chief-ps-worker-evaluator",
    ),
    pytest.param(
        tfjob({"Master": replica(1), "Worker": replica(2), "Evaluator": replica()}),
        id="master-instead-of-chief",
    ),
    pytest.param(
        tfjob({"chief": replica(), "ps": replica(), "worker": replica(3)}), id="lowercase"
    ),
    pytest.param(
        tfjob(
            {"PS": replica(1), "Worker": replica(3, restartPolicy="ExitCode")},
            enableDynamicWorker=True,
        ),
        id="dynamic-workers",
    ),
    pytest.param(tfjob({"Chief": replica(0), "Worker": replica(0)}), id="zero-replicas"),
    pytest.param(tfjob({"Worker": replica(restartPolicy="")}), id="empty-restart-policy"),
    pytest.param(
        tfjob(
            runPolicy={
                "cleanPodPolicy": "All",
                "ttlSecondsAfterFinished": 60,
                "activeDeadlineSeconds": 3600,
                "backoffLimit": 3,
                "suspend": True,
                "managedBy": "kueue.x-k8s.io/multikueue",
                "schedulingPolicy": {
                    "minAvailable": 2,
                    "queue": "default",
                    "minResources": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1},
                    "priorityClass": "high",
                    "scheduleTimeoutSeconds": 30,
                },
            },
            successPolicy="AllWorkers",
        ),
        id="every-run-policy-field",
    ),
    pytest.param(
        tfjob(
            {
                "Worker": {
                    "replicas": 1,
                    "template": {
                        "metadata": {"labels": {"a": "b"}, "annotations": {"x": "y"}},
                        "spec": {
                            "initContainers": [{"name": "init", "image": "busybox"}],
                            "containers": [
                                {
                                    "name": "sidecar",
                                    "image": "proxy",
                                    "ports": [{"containerPort": 80}],
                                },
                                {
                                    "name": "tensorflow",
                                    "image": "tf",
                                    "ports": [{"name": "tfjob-port", "containerPort": 3333}],
                                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                                },
                            ],
                            "schedulerName": "volcano",
                            "tolerations": [{"operator": "Exists"}],
                        },
                    },
                }
            }
        ),
        id="rich-pod-template",
    ),
]


def api_path(ns: str, name: str = "", sub: str = "") -> str:
    path = TFJOBS.format(ns=ns)
    return f"{path}/{name}{'/' + sub if sub else ''}" if name else path


def create(cluster: Cluster, ns: str, obj: Obj) -> tuple[int, Any]:
    return cluster.api.request("POST", api_path(ns), obj)


def create_ok(cluster: Cluster, ns: str, obj: Obj) -> Obj:
    status, body = create(cluster, ns, obj)
    assert status == 201, body
    status, body = cluster.api.request("GET", api_path(ns, body["metadata"]["name"]))
    assert status == 200, body
    out: Obj = body
    return out


def sdk_deserializes(obj: Obj) -> None:
    try:
        from kubeflow.training.api_client import ApiClient
        from kubeflow.training.constants import constants
        from kubeflow.training.utils.utils import FakeResponse
    except ImportError:
        return
    obj = copy.deepcopy(obj)
    # SDK 1.9.4 bug, independent of the CRD: its models lack the Quantity type, so
    # it cannot read schedulingPolicy.minResources from any server.
    (obj["spec"].get("runPolicy") or {}).get("schedulingPolicy", {}).pop("minResources", None)
    job = ApiClient().deserialize(FakeResponse(obj), constants.JOB_PARAMETERS["TFJob"]["model"])
    assert job.spec.run_policy is not None and job.spec.tf_replica_specs


# --- accepted --------------------------------------------------------------------------


def test_upstreams_examples_are_among_the_accepted() -> None:
    """The list below takes them from the conformance data: its absence fails in CI."""
    conformance.require(conformance.EXAMPLES_DIR)
    assert len(conformance.examples()) >= 4


@pytest.mark.parametrize(
    "obj",
    [
        *(pytest.param(from_file(p), id=p.name) for p in conformance.examples()),
        *(pytest.param(from_file(p), id=p.name) for p in SAMPLES),
        *sdk_jobs(),
        *VALID_MIXES,
    ],
)
def test_accepted_and_read_back_with_defaults(cluster: Cluster, namespace: str, obj: Obj) -> None:
    stored = create_ok(cluster, namespace, copy.deepcopy(obj))
    spec, given = stored["spec"], obj["spec"]
    # Schema defaults are persisted, and only where the user said nothing.
    run_policy = given.get("runPolicy") or {}
    assert spec["runPolicy"]["cleanPodPolicy"] == run_policy.get("cleanPodPolicy", "None")
    assert spec["runPolicy"]["suspend"] == run_policy.get("suspend", False)
    assert spec["successPolicy"] == given.get("successPolicy", "")
    assert spec["enableDynamicWorker"] == given.get("enableDynamicWorker", False)
    assert set(spec["tfReplicaSpecs"]) == set(given["tfReplicaSpecs"])
    for rtype, rs in spec["tfReplicaSpecs"].items():
        want = given["tfReplicaSpecs"][rtype]
        assert rs["replicas"] == want.get("replicas", 1)
        assert rs["restartPolicy"] == want.get("restartPolicy", "Never")
        # The pod template is preserved, never pruned or defaulted by the schema.
        assert rs["template"] == want["template"]
    # The controller's parser reads what the apiserver stored, losslessly.
    assert dump_tfjob(parse_tfjob(stored)) == stored
    sdk_deserializes(stored)


def test_generate_name(cluster: Cluster, namespace: str) -> None:
    obj = tfjob()
    obj["metadata"] = {"generateName": "gen-"}
    stored = create_ok(cluster, namespace, obj)
    assert stored["metadata"]["name"].startswith("gen-")


def test_null_replica_spec_is_dropped_not_stored(cluster: Cluster, namespace: str) -> None:
    # The apiserver prunes nulls of non-nullable fields before validation, so
    # `Worker: null` never reaches the controller (its parser would reject it).
    stored = create_ok(cluster, namespace, tfjob({"Chief": replica(), "Worker": None}))
    assert list(stored["spec"]["tfReplicaSpecs"]) == ["Chief"]


def test_unknown_spec_fields_are_pruned_but_template_fields_kept(
    cluster: Cluster, namespace: str
) -> None:
    obj = tfjob()
    obj["spec"]["notAField"] = 1
    obj["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["futureField"] = {"x": [1]}
    stored = create_ok(cluster, namespace, obj)
    assert "notAField" not in stored["spec"]
    assert stored["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["futureField"] == {
        "x": [1]
    }


# --- rejected: one per admission rule ---------------------------------------------------


def _mutated(mutate: Callable[[Obj], object]) -> Obj:
    obj = tfjob({"Chief": replica(1), "PS": replica(1), "Worker": replica(2)})
    mutate(obj)
    return obj


def _specs(o: Obj) -> Obj:
    out: Obj = o["spec"]["tfReplicaSpecs"]
    return out


def _containers(o: Obj) -> list[Obj]:
    out: list[Obj] = _specs(o)["Worker"]["template"]["spec"]["containers"]
    return out


REJECTED = [
    (lambda o: o["metadata"].update(name="1-starts-with-digit"), "metadata.name", "DNS-1035"),
    (lambda o: o["metadata"].update(name="has.dot"), "metadata.name", "DNS-1035"),
    (lambda o: o["metadata"].update(name="a" * 55), "metadata.name", "too long for its replicas"),
    (
        lambda o: _specs(o)["Worker"].update(replicas=999),
        "spec.tfReplicaSpecs",
        "must not ask for more than 1000 replicas in all",
    ),
    (lambda o: o.pop("spec"), "spec", "Required"),
    (lambda o: o["spec"].pop("tfReplicaSpecs"), "spec.tfReplicaSpecs", "Required"),
    (
        lambda o: _specs(o).update(Launcher=replica()),
        "spec.tfReplicaSpecs",
        "unknown replica type: must be one of",
    ),
    (lambda o: _specs(o).update(worker=replica()), "spec.tfReplicaSpecs", "in different case"),
    (lambda o: _specs(o).update(Master=replica(1)), "spec.tfReplicaSpecs", "Chief or Master"),
    (
        lambda o: _specs(o)["Chief"].update(replicas=2),
        "spec.tfReplicaSpecs",
        "Chief or Master replicas must be 0 or 1",
    ),
    (
        lambda o: _specs(o)["Worker"].update(replicas=-1),
        "spec.tfReplicaSpecs.Worker.replicas",
        "greater than or equal to 0",
    ),
    (
        lambda o: _specs(o)["Worker"].update(restartPolicy="Sometimes"),
        "spec.tfReplicaSpecs.Worker.restartPolicy",
        "Unsupported value",
    ),
    (
        lambda o: _specs(o)["Worker"].pop("template"),
        "spec.tfReplicaSpecs.Worker.template",
        "Required",
    ),
    (
        lambda o: _specs(o)["Worker"]["template"]["spec"].update(containers=[]),
        "spec.tfReplicaSpecs.Worker.template.spec.containers",
        "",
    ),
    (
        lambda o: _containers(o)[0].update(name="tf"),
        "spec.tfReplicaSpecs.Worker.template.spec.containers",
        "with name tensorflow",
    ),
    (
        lambda o: _containers(o)[0].update(ports=5),
        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].ports",
        "must be of type array",
    ),
    (
        lambda o: _containers(o)[0].update(env=5),
        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].env",
        "must be of type array",
    ),
    (
        lambda o: _containers(o)[0].update(ports=[{"name": "tfjob-port", "containerPort": "x"}]),
        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].ports[0].containerPort",
        "must be of type integer",
    ),
    (
        lambda o: _containers(o)[0].update(env=[{"value": "v"}]),
        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].env[0].name",
        "Required",
    ),
    (
        lambda o: _containers(o)[0].pop("image"),
        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].image",
        "Required",
    ),
    (
        lambda o: _containers(o)[0].update(image=""),
        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].image",
        "",
    ),
    (
        lambda o: _containers(o).append(container("tensorflow", "other")),
        "spec.tfReplicaSpecs.Worker.template.spec.containers[1]",
        "Duplicate value",
    ),
    (
        lambda o: o["spec"].update(runPolicy={"managedBy": "someone.else/controller"}),
        "spec.runPolicy.managedBy",
        "Unsupported value",
    ),
    (
        lambda o: o["spec"].update(runPolicy={"managedBy": ""}),
        "spec.runPolicy.managedBy",
        "Unsupported value",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "field", "message"),
    [pytest.param(*case, id=f"{i:02d}-{case[1]}") for i, case in enumerate(REJECTED)],
)
def test_rejected(
    cluster: Cluster, namespace: str, mutate: Callable[[Obj], object], field: str, message: str
) -> None:
    status, body = create(cluster, namespace, _mutated(mutate))
    assert status == 422, body
    # Schema errors spell map keys ".Worker", CEL and list-map errors "[Worker]".
    text = body["message"].replace("[Worker]", ".Worker")
    assert field in text and message in text, body["message"]


def test_rules_fit_the_cel_cost_budget_at_the_bounds(cluster: Cluster, namespace: str) -> None:
    # Five replica types with long keys would be rejected by the key rule, but must be
    # evaluated without a cost-limit error; the 64-container maximum must be accepted.
    many = [container(f"c{i}", "img") for i in range(63)] + [container()]
    obj = tfjob(
        {
            "Chief": replica(1),
            "PS": replica(3),
            "Worker": {"replicas": 2, "template": {"spec": {"containers": many}}},
            "Evaluator": replica(1),
        }
    )
    create_ok(cluster, namespace, obj)
    obj = tfjob({("x" * 2000) + str(i): replica() for i in range(5)}, name="long-keys")
    status, body = create(cluster, namespace, obj)
    assert status == 422 and "replica type" in body["message"], body
    assert "cost" not in body["message"].lower(), body


# --- update rules -------------------------------------------------------------------------

MK = "kueue.x-k8s.io/multikueue"
TO = "kubeflow.org/training-operator"


@pytest.mark.parametrize(
    ("before", "after", "error"),
    [
        pytest.param(
            {"managedBy": MK}, {"managedBy": TO}, "managedBy is immutable", id="mb-change"
        ),
        pytest.param({}, {"managedBy": MK}, "managedBy is immutable", id="mb-set"),
        pytest.param(
            {"managedBy": MK}, {"managedBy": None}, "managedBy is immutable", id="mb-unset"
        ),
        pytest.param(
            {"schedulingPolicy": {"queue": "a"}},
            {"schedulingPolicy": {"queue": "b"}},
            "queue is immutable",
            id="queue-change",
        ),
        pytest.param({"managedBy": TO}, {"backoffLimit": 5}, None, id="other-fields-mutable"),
        pytest.param(
            {"schedulingPolicy": {"queue": "a", "minAvailable": 10}},
            {"schedulingPolicy": {"minAvailable": 1}},
            None,
            id="min-available-mutable",
        ),
    ],
)
def test_update_rules(
    cluster: Cluster, namespace: str, before: Obj, after: Obj, error: str | None
) -> None:
    create_ok(cluster, namespace, tfjob(runPolicy=before))
    # A JSON merge patch, as the SDK's update_job sends.
    status, body = cluster.api.request(
        "PATCH",
        api_path(namespace, "job"),
        {"spec": {"runPolicy": after, "tfReplicaSpecs": {"Worker": {"replicas": 3}}}},
        content_type="application/merge-patch+json",
    )
    if error is None:
        assert status == 200, body
        assert body["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 3
    else:
        assert status == 422 and error in body["message"], body


# --- status subresource and printer columns --------------------------------------------------


def test_status_subresource_keeps_what_the_controller_writes(
    cluster: Cluster, namespace: str
) -> None:
    # Managed elsewhere: the session's controller must not write a status in between.
    stored = create_ok(cluster, namespace, tfjob(runPolicy={"managedBy": MANAGED_BY_MULTIKUEUE}))
    status = JobStatus(
        conditions=[
            JobCondition(
                type="Created",
                status="True",
                reason="TFJobCreated",
                message="TFJob job is created.",
                last_update_time="2024-05-01T10:00:00Z",
                last_transition_time="2024-05-01T10:00:00Z",
            )
        ],
        replica_statuses={"Worker": ReplicaStatus(active=1, restarts=2, failed_indexes="0-1")},
        start_time="2024-05-01T10:00:01Z",
        observed_generation=1,
    )
    body_status = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    code, body = cluster.api.request(
        "PUT", api_path(namespace, "job", "status"), {**stored, "status": body_status}
    )
    assert code == 200, body
    assert body["status"] == body_status
    assert JobStatus.model_validate(body["status"]) == status
    # Status is ignored on the main resource.
    code, body = cluster.api.request(
        "PUT", api_path(namespace, "job"), {**body, "status": {"startTime": "2030-01-01T00:00:00Z"}}
    )
    assert code == 200 and body["status"]["startTime"] == "2024-05-01T10:00:01Z", body
    sdk_deserializes(body)


def test_printer_columns(cluster: Cluster, namespace: str) -> None:
    create_ok(cluster, namespace, tfjob())
    out = cluster.kubectl("get", "tfjobs", "-n", namespace, "-o", "wide")
    header = out.splitlines()[0].split()
    assert header[:3] == ["NAME", "STATE", "AGE"], out
    assert {"SUSPENDED", "STARTED", "COMPLETED"} <= set(header)
    out = cluster.kubectl("get", "tfjob", "-n", namespace, "-o", "name")  # the singular
    assert out.strip() == "tfjob.kubeflow.org/job"


# --- the upstream v1.9.0 CRD accepts our samples -------------------------------------------

UPSTREAM_GROUP = "upstream-v190.kubeflow.test"


@pytest.fixture(scope="module")
def upstream_crd(cluster: Cluster) -> Iterator[str]:
    """The upstream CRD's schema, unchanged, under a scratch group (ours keeps tfjobs)."""
    path = conformance.require(conformance.UPSTREAM_CRD)
    crd = yaml.safe_load(path.read_text())
    crd["spec"]["group"] = UPSTREAM_GROUP
    crd["metadata"] = {"name": f"tfjobs.{UPSTREAM_GROUP}"}
    cluster.api.apply(crd, CRDS)

    def established() -> bool:
        code, body = cluster.api.request("GET", f"{CRDS}/tfjobs.{UPSTREAM_GROUP}")
        conds = ((body.get("status") or {}).get("conditions") or []) if code == 200 else []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

    from tests.cluster.kube import wait_for

    wait_for(established, 60, "upstream CRD established")
    yield UPSTREAM_GROUP
    cluster.api.request("DELETE", f"{CRDS}/tfjobs.{UPSTREAM_GROUP}")


@pytest.mark.parametrize(
    "obj",
    [
        *(pytest.param(from_file(p), id=p.name) for p in SAMPLES),
        *sdk_jobs(),
        *VALID_MIXES,
    ],
)
def test_upstream_schema_accepts_our_objects(
    cluster: Cluster, namespace: str, upstream_crd: str, obj: Obj
) -> None:
    obj = {**copy.deepcopy(obj), "apiVersion": f"{upstream_crd}/v1"}
    path = f"/apis/{upstream_crd}/v1/namespaces/{namespace}/tfjobs?fieldValidation=Strict"
    status, body = cluster.api.request("POST", path, obj)
    # fieldValidation=Strict: a field unknown to the upstream schema would be a 422.
    assert status == 201, body
