"""The kubeflow-training SDK (pinned 1.9.4), unchanged, against our controller."""

from __future__ import annotations

import threading

import pytest
from kubeflow.training import (
    KubeflowOrgV1ReplicaSpec,
    KubeflowOrgV1RunPolicy,
    KubeflowOrgV1TFJob,
    KubeflowOrgV1TFJobSpec,
    TrainingClient,
)
from kubernetes import client as k8s

from tests.cluster.kube import ControllerProcess, Kube, wait_for
from tests.conftest import Cluster

#: needs kwok pods that exit on the test's say
pytestmark = pytest.mark.local_only


def sdk_tfjob(name: str, namespace: str, workers: int) -> KubeflowOrgV1TFJob:
    """Built the way the SDK's own e2e test builds its TFJob."""
    container = k8s.V1Container(
        name="tensorflow",
        image="kubeflow/tf-mnist-with-summaries:1.0",
        command=["python", "/var/tf_mnist/mnist_with_summaries.py", "--learning_rate=0.01"],
        resources=k8s.V1ResourceRequirements(limits={"memory": "1Gi", "cpu": "0.5"}),
    )
    replica = KubeflowOrgV1ReplicaSpec(
        replicas=workers,
        restart_policy="Never",
        template=k8s.V1PodTemplateSpec(
            metadata=k8s.V1ObjectMeta(annotations={"sidecar.istio.io/inject": "false"}),
            spec=k8s.V1PodSpec(containers=[container]),
        ),
    )
    return KubeflowOrgV1TFJob(
        api_version="kubeflow.org/v1",
        kind="TFJob",
        metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
        spec=KubeflowOrgV1TFJobSpec(
            run_policy=KubeflowOrgV1RunPolicy(clean_pod_policy="None"),
            tf_replica_specs={"Worker": replica},
        ),
    )


def test_training_client_end_to_end(
    cluster: Cluster, controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    tc = TrainingClient(config_file=cluster.kubeconfig, namespace=namespace, job_kind="TFJob")
    name = "tfjob-mnist-ci-test"
    tc.create_job(job=sdk_tfjob(name, namespace, workers=2), namespace=namespace)

    # What the SDK serialised arrived as the API spells it (camelCase, the template
    # whole), read back with another client; and the SDK reads the stored object.
    raw = kube.tfjob(namespace, name) or {}
    worker = raw["spec"]["tfReplicaSpecs"]["Worker"]
    assert (worker["replicas"], worker["restartPolicy"]) == (2, "Never")
    (container,) = worker["template"]["spec"]["containers"]
    assert container["resources"]["limits"] == {"memory": "1Gi", "cpu": "0.5"}
    assert raw["spec"]["runPolicy"]["cleanPodPolicy"] == "None"
    job = tc.get_job(name, namespace)
    assert job.metadata.uid == raw["metadata"]["uid"]
    assert [j.metadata.uid for j in tc.list_jobs(namespace)] == [raw["metadata"]["uid"]]

    # Training "finishes" once worker-0 (the master role without a Chief) exits 0.
    def finish_master() -> None:
        pods = wait_for(
            lambda: (
                (p := kube.pods(namespace, name))
                and len(p) == 2
                and all(x.get("status", {}).get("phase") == "Running" for x in p)
                and p
            ),
            60,
            "2 running pods",
        )
        assert pods
        kube.exit_pod(namespace, f"{name}-worker-0", 0)

    finisher = threading.Thread(target=finish_master)
    finisher.start()
    done = tc.wait_for_job_conditions(
        name, namespace, expected_conditions={"Succeeded"}, wait_timeout=90, polling_interval=1
    )
    finisher.join()
    # our status, as the SDK's models read it
    assert [(c.type, c.status) for c in done.status.conditions] == [
        ("Created", "True"),
        ("Running", "False"),
        ("Succeeded", "True"),
    ]
    # as upstream: on success the replicas still active count as succeeded
    workers = done.status.replica_statuses["Worker"]
    assert (workers.succeeded, workers.active or 0) == (2, 0)
    assert done.status.start_time <= done.status.completion_time
    assert tc.is_job_created(name, namespace, job=done)
    assert tc.is_job_succeeded(name, namespace, job=done)
    assert not tc.is_job_running(name, namespace, job=done)
    assert not tc.is_job_restarting(name, namespace, job=done)
    assert not tc.is_job_failed(name, namespace, job=done)
    assert tc.get_job_pod_names(name, namespace, is_master=True) == [f"{name}-worker-0"]
    assert sorted(tc.get_job_pod_names(name, namespace)) == [
        f"{name}-worker-0",
        f"{name}-worker-1",
    ]

    tc.delete_job(name, namespace)
    wait_for(
        lambda: not kube.pods(namespace, name) and not kube.services(namespace, name),
        30,
        "pods and services garbage-collected",
    )
    assert kube.tfjob(namespace, name) is None
