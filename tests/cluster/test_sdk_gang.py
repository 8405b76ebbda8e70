"""The kubeflow-training SDK's own gang scheduling e2e test (training-operator v1.9,
sdk/python/test/e2e/test_e2e_tfjob.py `test_sdk_e2e_with_gang_scheduling`, run there
with GANG_SCHEDULER_NAME=scheduler-plugins), ported to run unchanged against our
controller and the local cluster's scheduler-plugins: the same job, the same SDK calls,
the same checks.

A job of one worker asks for minAvailable 10, so its PodGroup can never be satisfied: it
must stay Created. Then minAvailable is lowered to 1 and it must run to Succeeded.
Coscheduling looks at the pod again only on a PodGroup update. The spec change is one,
but the retry it starts reads the PodGroup from Coscheduling's own cache, which may not
have the new minMember yet. The PodGroup controller (hack/cluster.sh runs
scheduler-plugins' own beside the scheduler) makes a second update once the group can
leave Pending, usually after that cache has the spec: the whole test then finishes
within DEADLINE. Our part is timed on its own: the PodGroup's minMember follows the job
within OUR_PART seconds. When both retries read the old group, the pod waits for the
scheduler's flush of unschedulable pods (hack/cluster/gang.py: at most
STALE_RETRY_BOUND_SECONDS here), which the deadline allows for; a failure says which
part was late.

What differs, and why: kwok runs the pods, so a thread stands in for the training
container and has worker 0 exit 0 once it runs; the SDK polls every second, not every 15
(a poll period would otherwise be most of the time measured); its three 5 s sleeps
watch the pods instead, to see nothing bound meanwhile; its image has no registry host;
and its final print_job_results is left out (it reads container logs, which kwok has
not).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime

import pytest
from kubeflow.training import (
    KubeflowOrgV1ReplicaSpec,
    KubeflowOrgV1RunPolicy,
    KubeflowOrgV1SchedulingPolicy,
    KubeflowOrgV1TFJob,
    KubeflowOrgV1TFJobSpec,
    TrainingClient,
)
from kubeflow.training.constants import constants
from kubernetes.client import (
    V1Container,
    V1ObjectMeta,
    V1PodSpec,
    V1PodTemplateSpec,
    V1ResourceRequirements,
)

from tests.cluster.kube import ControllerProcess, Kube, wait_for, wait_namespaces_gone
from tests.cluster.test_gang import podgroup
from tests.cluster.test_gang_scheduler import Binds, gang, hold
from tests.conftest import Cluster

#: needs the local cluster's gang scheduler and kwok pods
pytestmark = pytest.mark.local_only

JOB_NAME = "tfjob-mnist-ci-test"
CONTAINER_NAME = "tensorflow"
#: Seconds the whole test takes at most, from the first create to the job's Succeeded,
#: unless the scheduler's retry read a stale PodGroup (see the module doc).
DEADLINE = 60.0
#: Seconds from the job's update to its PodGroup's minMember following it.
OUR_PART = 10.0


@pytest.fixture
def gang_controller(
    cluster: Cluster, controller: ControllerProcess, kube: Kube, namespace: str
) -> Iterator[ControllerProcess]:
    """Our controller as the SDK's e2e runs training-operator: with gang scheduling for
    scheduler-plugins (here for the test's namespace only, while the session's
    controller is stopped), and the session's controller back afterwards."""
    wait_namespaces_gone(kube)
    controller.stop()
    gc = ControllerProcess(
        cluster,
        f"--gang-scheduler-name={gang.SCHEDULER_NAME}",
        f"--namespace={namespace}",
        log_name="sdk-gang",
    )
    try:
        gc.start()
        yield gc
        assert gc.proc is not None and gc.proc.poll() is None, "the gang controller exited"
    finally:
        kube.req("DELETE", kube.tfjobs(namespace))
        wait_for(lambda: not kube.pods(namespace), 60, "the job's pods gone")
        code = gc.stop()
        controller.start()
    assert code == 0


def generate_container() -> V1Container:
    return V1Container(
        name=CONTAINER_NAME,
        image="kubeflow-ci/tf-mnist-with-summaries:1.0",
        command=[
            "python",
            "/var/tf_mnist/mnist_with_summaries.py",
            "--log_dir=/train/logs",
            "--learning_rate=0.01",
            "--batch_size=150",
        ],
        resources=V1ResourceRequirements(limits={"memory": "4Gi", "cpu": "1.6"}),
    )


def generate_tfjob(
    job_namespace: str,
    worker: KubeflowOrgV1ReplicaSpec,
    scheduling_policy: KubeflowOrgV1SchedulingPolicy | None = None,
) -> KubeflowOrgV1TFJob:
    return KubeflowOrgV1TFJob(
        api_version=constants.API_VERSION,
        kind=constants.TFJOB_KIND,
        metadata=V1ObjectMeta(name=JOB_NAME, namespace=job_namespace),
        spec=KubeflowOrgV1TFJobSpec(
            run_policy=KubeflowOrgV1RunPolicy(
                clean_pod_policy="None",
                scheduling_policy=scheduling_policy,
            ),
            tf_replica_specs={"Worker": worker},
        ),
    )


def verify_unschedulable_job_e2e(
    client: TrainingClient, name: str, namespace: str, binds: Binds
) -> None:
    """The SDK's check: Created, and three times 5 s apart still Created and not
    Running; here with the pods watched through those 15 s (none may bind) and the job
    read afresh at each look."""
    client.wait_for_job_conditions(
        name, namespace, expected_conditions={constants.JOB_CONDITION_CREATED}, polling_interval=1
    )
    for _ in range(3):
        job = client.get_job(name, namespace)
        assert client.is_job_created(job=job) and not client.is_job_running(job=job), (
            f"{client.job_kind} should be in Created condition and not in Running"
        )
        hold(binds, 5, expected=0)


def verify_job_e2e(client: TrainingClient, name: str, namespace: str, wait_timeout: int) -> None:
    job = client.wait_for_job_conditions(
        name, namespace, wait_timeout=wait_timeout, polling_interval=1
    )
    conditions = client.get_job_conditions(job=job)
    # If Job is complete fast, it has 2 conditions: Created and Succeeded.
    assert len(conditions) >= 2, f"{client.job_kind} conditions are invalid: {conditions}"
    assert (
        client.is_job_created(job=job)
        and client.is_job_succeeded(job=job)
        and not client.is_job_running(job=job)
        and not client.is_job_restarting(job=job)
        and not client.is_job_failed(job=job)
    ), f"{client.job_kind} should be Succeeded and Created only: {conditions}"


def test_sdk_e2e_with_gang_scheduling(
    cluster: Cluster, kube: Kube, namespace: str, gang_controller: ControllerProcess
) -> None:
    client = TrainingClient(
        config_file=cluster.kubeconfig, namespace=namespace, job_kind=constants.TFJOB_KIND
    )
    job_namespace = namespace
    container = generate_container()
    worker = KubeflowOrgV1ReplicaSpec(
        replicas=1,
        restart_policy="Never",
        template=V1PodTemplateSpec(
            metadata=V1ObjectMeta(annotations={constants.ISTIO_SIDECAR_INJECTION: "false"}),
            spec=V1PodSpec(containers=[container], scheduler_name=gang.SCHEDULER_NAME),
        ),
    )
    unschedulable_tfjob = generate_tfjob(
        job_namespace, worker, KubeflowOrgV1SchedulingPolicy(min_available=10)
    )
    schedulable_tfjob = generate_tfjob(
        job_namespace, worker, KubeflowOrgV1SchedulingPolicy(min_available=1)
    )

    t0 = time.monotonic()
    with Binds(cluster, namespace) as binds:
        client.create_job(job=unschedulable_tfjob, namespace=job_namespace)
        verify_unschedulable_job_e2e(client, JOB_NAME, job_namespace, binds)

        updated = datetime.now()
        client.update_job(schedulable_tfjob, JOB_NAME, job_namespace)
        wait_for(
            lambda: (
                (podgroup(kube, namespace, JOB_NAME) or {}).get("spec", {}).get("minMember") == 1
            ),
            OUR_PART,
            "the PodGroup's minMember lowered to 1",
        )
        deadline = DEADLINE + gang.STALE_RETRY_BOUND_SECONDS

        def finish_master() -> None:
            # kwok's pod stands in for training: worker 0 (the master role without a
            # Chief) exits 0 once it runs
            wait_for(
                lambda: [
                    p
                    for p in kube.pods(namespace, JOB_NAME)
                    if p["status"].get("phase") == "Running"
                ],
                deadline,
                "the worker Running",
            )
            kube.exit_pod(namespace, f"{JOB_NAME}-worker-0", 0)

        finisher = threading.Thread(target=finish_master, daemon=True)
        finisher.start()
        remaining = deadline - (time.monotonic() - t0)
        try:
            verify_job_e2e(client, JOB_NAME, job_namespace, wait_timeout=max(1, int(remaining)))
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{what_waits(cluster, kube, namespace)}") from exc
        finisher.join(5)
        assert binds.count() == 1
    took = time.monotonic() - t0
    print(f"the SDK's gang test took {took:.1f}s")
    assert took < DEADLINE or stale_retry_seen(cluster, namespace, updated), (
        f"{took:.1f}s, and the scheduler never tried the pod with the old PodGroup after"
        f" the update:\n{what_waits(cluster, kube, namespace)}"
    )
    client.delete_job(JOB_NAME, job_namespace)
    wait_for(lambda: not kube.pods(namespace, JOB_NAME), 30, "the job's pods collected")


def scheduler_log(cluster: Cluster, namespace: str) -> list[str]:
    """The gang scheduler's log lines about the test's pod."""
    path = cluster.dir / "logs" / f"{gang.COMPONENT}.log"
    pod = f"{namespace}/{JOB_NAME}-worker-0"
    return [ln for ln in path.read_text(errors="replace").splitlines() if pod in ln]


def logged_at(line: str, year: int) -> datetime | None:
    """A klog line's time ("E1206 02:34:57.187180 ..."), in the machine's local time."""
    try:
        return datetime.strptime(f"{year} {line[1:21]}", "%Y %m%d %H:%M:%S.%f")
    except ValueError:
        return None


def stale_retry_seen(cluster: Cluster, namespace: str, since: datetime) -> bool:
    """Whether the scheduler turned the pod down for minMember 10 after ``since`` (the
    job's update): a retry that read the old group."""
    return any(
        (at := logged_at(ln, since.year)) is not None and at >= since
        for ln in scheduler_log(cluster, namespace)
        if "minMember of group: 10" in ln
    )


def what_waits(cluster: Cluster, kube: Kube, namespace: str) -> str:
    group = podgroup(kube, namespace, JOB_NAME) or {}
    pods = [
        {
            "name": p["metadata"]["name"],
            "node": p["spec"].get("nodeName"),
            "phase": p["status"].get("phase"),
            "conditions": p["status"].get("conditions"),
        }
        for p in kube.pods(namespace, JOB_NAME)
    ]
    return (
        f"PodGroup spec {group.get('spec')} status {group.get('status')}\n"
        f"pods {pods}\n"
        "scheduler log:\n" + "\n".join(scheduler_log(cluster, namespace)[-10:])
    )
