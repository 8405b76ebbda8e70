"""Odd input that the CRD accepts, against the real apiserver and controller (issue 10)."""

from __future__ import annotations

import threading
import time
import urllib.request
from typing import Any

import pytest

from tests.cluster.kube import (
    ControllerProcess,
    Kube,
    PodHistory,
    condition,
    wait_for,
    wait_job,
    wait_namespaces_gone,
    wait_running,
)
from tests.cluster.policy_helpers import TEMPLATE, make_job, metric, settled
from tests.conftest import Cluster

LABEL = "training.kubeflow.org/"


@pytest.mark.local_only  # kwok pods that exit on the test's say
def test_zero_replica_chief_counts_as_absent_and_worker0_decides(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    job = make_job("zero-chief", chief="Never", workers=(2, "Never"))
    job["spec"]["tfReplicaSpecs"]["Chief"]["replicas"] = 0
    name = kube.create_tfjob(namespace, job)["metadata"]["name"]
    pods = wait_for(
        lambda: (ps := kube.pods(namespace, name)) and len(ps) == 2 and ps, 30, "2 worker pods"
    )
    assert [p["metadata"]["name"] for p in pods] == [f"{name}-worker-0", f"{name}-worker-1"]
    roles = [p["metadata"]["labels"].get(LABEL + "job-role") for p in pods]
    assert roles == ["master", None], "worker 0 coordinates when the Chief has no pods"
    settled(kube, controller, namespace, name)
    assert not condition(kube.tfjob(namespace, name), "Succeeded"), "0 of 0 is not success"
    wait_running(kube, namespace, name, 2)
    kube.exit_pod(namespace, f"{name}-worker-0", 0)
    done = wait_job(kube, namespace, name, "Succeeded")
    assert done["status"]["replicaStatuses"]["Worker"]["succeeded"] >= 1


def test_template_restart_policy_overridden_with_upstreams_warning(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    job = make_job("tmpl-policy", workers=(1, "OnFailure"))
    template: dict[str, Any] = {"spec": {**TEMPLATE["spec"], "restartPolicy": "Always"}}
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"] = template
    name = kube.create_tfjob(namespace, job)["metadata"]["name"]
    pod = wait_for(lambda: kube.pod(namespace, f"{name}-worker-0"), 30, "the worker pod")
    assert pod["spec"]["restartPolicy"] == "OnFailure"

    def warning() -> list[dict[str, Any]]:
        return [
            e
            for e in kube.events(namespace)
            if e["involvedObject"].get("name") == name
            and e["reason"] == "SettedPodTemplateRestartPolicy"
        ]

    (event,) = wait_for(warning, 15, "the SettedPodTemplateRestartPolicy event")
    assert event["type"] == "Warning"
    assert event["message"] == (
        "Restart policy in pod template will be overwritten by restart policy in replica spec"
    )


REPLICAS = {"Chief": 1, "Master": 1, "PS": 2, "Worker": 3, "Evaluator": 1}


def test_names_of_every_length_either_fit_or_are_rejected_naming_the_limit(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    """Job names of 40 to 63 characters with each replica type: admission rejects the
    job whose longest child name would pass 63 characters; every accepted job gets
    every pod and service it asks for (none wedged with missing services)."""
    accepted: dict[str, int] = {}
    for rtype, replicas in REPLICAS.items():
        for length in range(40, 64):
            name = f"{rtype.lower()[0]}{length}-".ljust(length, "x")
            job = make_job(name, workers=None)
            job["spec"]["tfReplicaSpecs"] = {
                rtype: {"replicas": replicas, "restartPolicy": "Never", "template": TEMPLATE}
            }
            longest = len(f"{name}-{rtype.lower()}-{replicas - 1}")
            status, body = kube.api.request("POST", kube.tfjobs(namespace), job)
            if longest <= 63:
                assert status == 201, (name, body)
                accepted[name] = replicas
            else:
                assert status == 422, (name, longest, body)
                assert "metadata.name" in body["message"], body["message"]
                assert "at most 63 characters" in body["message"], body["message"]
    assert len(accepted) == sum(24 - (len(rt) + 3) for rt in REPLICAS)

    def children_complete() -> bool:
        pods = {p["metadata"]["name"] for p in kube.pods(namespace)}
        services = {s["metadata"]["name"] for s in kube.services(namespace)}
        want = {
            f"{name}-{rtype.lower()}-{i}"
            for name, replicas in accepted.items()
            for rtype in REPLICAS
            if name.startswith(rtype.lower()[0] + str(len(name)))
            for i in range(replicas)
        }
        return want <= pods and want <= services

    wait_for(children_complete, 90, "every pod and service of every accepted job")


def _refused_job(kube: Kube, namespace: str, name: str, container: dict[str, Any]) -> str:
    job = make_job(name, chief="Never", workers=(2, "Never"))
    job["spec"]["runPolicy"] = {"cleanPodPolicy": "All"}
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"] = {"spec": {"containers": [container]}}
    return str(kube.create_tfjob(namespace, job)["metadata"]["name"])


def _warnings(kube: Kube, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in kube.events(namespace)
        if e["involvedObject"].get("name") == name and e["reason"] == reason
    ]


def _assert_failed_by_refusal(kube: Kube, namespace: str, name: str, apiserver_says: str) -> None:
    (event, *_) = wait_for(
        lambda: _warnings(kube, namespace, name, "FailedCreatePod"), 30, "FailedCreatePod"
    )
    assert event["type"] == "Warning" and apiserver_says in event["message"], event
    failed = wait_job(kube, namespace, name, "Failed", timeout=60)
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "FailedCreatePod", cond
    assert cond["message"].startswith(f"TFJob {namespace}/{name} has failed because pod ")
    assert apiserver_says in cond["message"], cond["message"]
    # cleanPodPolicy All: the pods that did start are removed, none is left holding a node
    wait_for(lambda: not kube.pods(namespace, name), 30, "pods cleaned up")


def test_a_create_the_pod_api_rejects_fails_the_job_with_its_message(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    """422: a container field our schema leaves open and the Pod API refuses."""
    bad = {**TEMPLATE["spec"]["containers"][0], "imagePullPolicy": "Sometimes"}
    name = _refused_job(kube, namespace, "pod-api-422", bad)
    _assert_failed_by_refusal(kube, namespace, name, 'Unsupported value: "Sometimes"')


def test_a_create_a_limit_range_forbids_fails_the_job_with_its_message(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    """403 from admission: the namespace's LimitRange caps a container at 1 CPU."""
    kube.req(
        "POST",
        f"/api/v1/namespaces/{namespace}/limitranges",
        {
            "metadata": {"name": "cap"},
            "spec": {"limits": [{"type": "Container", "max": {"cpu": "1"}}]},
        },
    )
    big = {**TEMPLATE["spec"]["containers"][0], "resources": {"limits": {"cpu": "2"}}}
    name = _refused_job(kube, namespace, "limit-range-403", big)
    _assert_failed_by_refusal(kube, namespace, name, "maximum cpu usage per Container is 1")


@pytest.mark.local_only  # kwok pods that exit on the test's say
def test_an_unreadable_status_on_a_finished_job_fails_closed(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    """A hand edit leaves a Succeeded job's status unreadable (the schema lets a year-0
    timestamp through): the job is not re-run, nothing is written, a Warning says why."""
    job = make_job("garbled", chief="Never", workers=(1, "Never"))
    job["spec"]["runPolicy"] = {"cleanPodPolicy": "All"}
    name = kube.create_tfjob(namespace, job)["metadata"]["name"]
    wait_running(kube, namespace, name, 2)
    kube.exit_pod(namespace, f"{name}-chief-0", 0)
    done = wait_job(kube, namespace, name, "Succeeded")
    wait_for(lambda: not kube.pods(namespace, name), 30, "pods cleaned up")

    garbled = {**done, "status": {**done["status"], "startTime": "0000-01-01T00:00:00Z"}}
    stored = kube.req("PUT", f"{kube.tfjobs(namespace)}/{name}/status", garbled)
    assert stored["status"]["startTime"] == "0000-01-01T00:00:00Z"
    (event,) = wait_for(
        lambda: _warnings(kube, namespace, name, "TFJobStatusUnreadable"), 15, "the Warning"
    )
    assert "status.startTime" in event["message"], event["message"]
    settled(kube, controller, namespace, name)
    assert kube.pods(namespace, name) == [] and kube.services(namespace, name) == []
    after = kube.tfjob(namespace, name)
    assert after is not None and after["status"] == stored["status"], "nothing was written"


#: A kubelet's liveness probe gives up after timeoutSeconds, 1 by default: an answer
#: later than that is a failed probe, as the kubelet would count it.
PROBE_TIMEOUT = 1.0


class HealthProbe(threading.Thread):
    """Probes /healthz as a kubelet would (every 0.2 s, 1 s timeout), counting the
    probes that fail and recording the slowest answer for the log."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/healthz"
        self.slowest = 0.0
        self.failures = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            start = time.monotonic()
            try:
                with urllib.request.urlopen(self.url, timeout=PROBE_TIMEOUT) as r:
                    ok = r.status == 200
            except OSError:
                ok = False
            took = time.monotonic() - start
            self.slowest = max(self.slowest, took)
            self.failures += not ok or took > PROBE_TIMEOUT


def _lag_buckets(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("event_loop_lag_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[le] = float(line.rsplit(" ", 1)[1])
    return out


@pytest.mark.local_only  # kwok pods that exit on the test's say
def test_the_largest_job_allowed_is_created_while_a_small_one_finishes(
    cluster: Cluster, controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    """1,000 replicas (the admission limit) are planned and created, while a small job
    beside it still runs to Succeeded, a kubelet's liveness probe never fails and the
    lease is held; 1,001 is refused. (The event loop's lag is printed for the log, not
    asserted: a timing is a benchmark's figure, not a test's verdict.)"""
    over = make_job("too-big", chief="Never", workers=(1000, "Never"))
    status, body = kube.api.request("POST", kube.tfjobs(namespace), over)
    assert status == 422 and "more than 1000 replicas" in body["message"], body

    # measure the controller's own load only
    wait_namespaces_gone(kube)
    controller.stop()  # this test's controller runs with a lease and a faster client
    lease = "tfjob-controller-scale-test"
    big_ctl = ControllerProcess(
        cluster,
        "--leader-elect",
        "--leader-election-namespace=default",
        f"--leader-election-id={lease}",
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        "--loop-lag-interval=0.02",  # enough samples for a p99 over a few seconds
        log_name="tfjob-controller-scale",
    )
    big_ctl.start()
    probe = HealthProbe(big_ctl.health_port)
    try:
        wait_for(lambda: metric(big_ctl.metrics(), "leader_election_master_status") == 1, 30,
                 "the lease")  # fmt: skip
        before = _lag_buckets(big_ctl.metrics())
        probe.start()
        big = make_job("big", chief="Never", workers=(999, "Never"))
        # Nowhere to run: the point is planning and creating, not 1,000 kwok pods.
        big["spec"]["tfReplicaSpecs"]["Worker"]["template"] = {
            "spec": {**TEMPLATE["spec"], "nodeSelector": {"tfjob-test/none": "none"}}
        }
        kube.create_tfjob(namespace, big)
        small = kube.create_tfjob(namespace, make_job("small", chief="Never", workers=(1, "Never")))
        small_name = small["metadata"]["name"]
        wait_running(kube, namespace, small_name, 2, timeout=60)
        kube.exit_pod(namespace, f"{small_name}-chief-0", 0)
        wait_job(kube, namespace, small_name, "Succeeded", timeout=60)
        wait_for(
            lambda: (
                len(kube.pods(namespace, "big")) == 1000
                and len(kube.services(namespace, "big")) == 1000
            ),
            180,
            "1,000 pods and 1,000 services of the big job",
        )
        text = big_ctl.metrics()
        assert big_ctl.proc is not None and big_ctl.proc.poll() is None
        assert metric(text, "leader_election_master_status") == 1, "the lease was kept"
        after = _lag_buckets(text)
        # the garbage collector's pauses are measured (controller.observability.heap)
        assert metric(text, "python_gc_pause_seconds_count", generation="0") > 0
        samples = after["+Inf"] - before["+Inf"]
        within = after["0.1"] - before["0.1"]
        fast = after["0.025"] - before["0.025"]
        print(f"loop lag: {samples:.0f} samples, {within / max(samples, 1):.3f} <= 100 ms,"
              f" {fast / max(samples, 1):.3f} <= 25 ms; slowest /healthz {probe.slowest:.3f} s")  # fmt: skip
    finally:
        probe.done.set()
        code = big_ctl.stop()
        controller.start()  # whatever happened: the tests after this one need it
    assert code == 0
    assert probe.failures == 0, f"{probe.failures} liveness probes failed"


def test_renaming_master_to_chief_never_runs_both_coordinators(
    cluster: Cluster, controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    with PodHistory(cluster, namespace) as history:
        job = make_job("rename", workers=(1, "Never"))
        job["spec"]["tfReplicaSpecs"]["Master"] = {
            "replicas": 1, "restartPolicy": "Never", "template": TEMPLATE
        }  # fmt: skip
        name = kube.create_tfjob(namespace, job)["metadata"]["name"]
        wait_running(kube, namespace, name, 2)
        kube.patch_tfjob(
            namespace,
            name,
            {
                "spec": {
                    "tfReplicaSpecs": {
                        "Master": None,
                        "Chief": {"replicas": 1, "restartPolicy": "Never", "template": TEMPLATE},
                    }
                }
            },
        )
        wait_for(lambda: kube.pod(namespace, f"{name}-chief-0"), 30, "chief-0")
        wait_for(lambda: kube.pod(namespace, f"{name}-master-0") is None, 30, "master-0 gone")
        created = next(i for i, (t, n, _) in enumerate(history.events)
                       if t == "ADDED" and n == f"{name}-chief-0")  # fmt: skip
        deleted = next(i for i, (t, n, _) in enumerate(history.events)
                       if t == "DELETED" and n == f"{name}-master-0")  # fmt: skip
        assert deleted < created, history.events


@pytest.mark.local_only  # kwok pods that exit on the test's say
def test_a_chief_deleted_gracefully_that_exits_0_succeeds_the_job(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    """A node drain deletes the chief, which finishes within its grace period: that is
    the job's success, not a disruption to re-run (issue 11)."""
    job = make_job("drained", chief="Never", workers=(1, "Never"))
    name = kube.create_tfjob(namespace, job)["metadata"]["name"]
    wait_running(kube, namespace, name, 2)
    chief = f"{name}-chief-0"
    # The program handles SIGTERM and exits 0 within its grace period (kwok's deletion
    # stage ends the pod with the code in kwok.test/exit-on-delete).
    kube.req(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/{chief}",
        {"metadata": {"annotations": {"kwok.test/exit-on-delete": "0"}}},
        "application/merge-patch+json",
    )
    kube.delete_pod(namespace, chief)
    done = wait_job(kube, namespace, name, "Succeeded")
    assert done["status"]["replicaStatuses"]["Chief"].get("disruptions", 0) == 0
    # Its end recorded, the pod is let go and leaves the API.
    wait_for(lambda: kube.pod(namespace, chief) is None, 20, "the drained chief gone")
