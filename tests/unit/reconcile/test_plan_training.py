"""trainingProgress in the plan: laid over what a pass decides, written alone only
when it changed, kept when nothing is reported; and what pods are given to report."""

from __future__ import annotations

from typing import Any

from reconcile.api.spec import read_job
from reconcile.objects.observed import observe_all
from reconcile.objects.reporting import Reporting
from reconcile.plan import Plan, PlanConfig, Snapshot, compute_plan
from reconcile.progress.records import ReplicaRecord, Reporter, record
from reconcile.progress.wire import Report
from tests.builders import at, make_pod, make_service, make_tfjob

REPORTING = PlanConfig(reporting=Reporting("https://ctl.example:10443", token_seconds=1200))


def running_job(
    status: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], list[Any], list[Any]]:
    b = make_tfjob("mnist").worker(2)
    job = b.obj()
    pods = [make_pod(job, "Worker", i).running().obj() for i in range(2)]
    services = [make_service(job, "Worker", i) for i in range(2)]
    first = plan(job, pods, services, ())
    job = b.status(status if status is not None else first.status).obj()
    return job, pods, services


def plan(job: dict[str, Any], pods: list[Any], services: list[Any], training: Any) -> Plan:
    snap = Snapshot(read_job(job), observe_all(pods), services, at(100), training=training)
    return compute_plan(snap, REPORTING)


def reports(pod: dict[str, Any], steps: list[int]) -> ReplicaRecord:
    meta = pod["metadata"]
    who = Reporter(
        "Worker",
        int(meta["labels"]["training.kubeflow.org/replica-index"]),
        meta["name"],
        meta["uid"],
        "n1",
    )
    rec = None
    for i, s in enumerate(steps):
        rec = record(
            rec, who, Report(step=s, total_steps=100, metrics={"loss": 1.0 / (s + 1)}), at(90 + i)
        )
    assert rec is not None
    return rec


def test_progress_alone_is_a_training_only_write() -> None:
    job, pods, services = running_job()
    assert plan(job, pods, services, ()).status is None  # the world is as stored
    p = plan(job, pods, services, [reports(pods[0], [10, 20]), reports(pods[1], [10, 21])])
    assert p.training_only and not p.progress
    tp = p.status["trainingProgress"]  # type: ignore[index]
    assert (tp["reporter"], tp["step"], tp["percent"], tp["stepsPerSecond"]) == (
        "worker-0",
        20,
        20,
        10.0,
    )
    assert tp["replicas"]["Worker"]["reporting"] == 2
    # everything else as stored
    assert {k: v for k, v in p.status.items() if k != "trainingProgress"} == job["status"]  # type: ignore[union-attr]


def test_the_same_progress_is_no_write_and_none_keeps_what_is_stored() -> None:
    job, pods, services = running_job()
    recs = [reports(pods[0], [10, 20])]
    shown = plan(job, pods, services, recs).status
    job["status"] = shown
    assert plan(job, pods, services, recs).status is None
    assert plan(job, pods, services, ()).status is None  # a restarted controller: kept
    # reports of pods that are gone count for nothing: kept too
    gone = [reports(make_pod(job, "Worker", 0).uid("old").obj(), [5])]
    assert plan(job, pods, services, gone).status is None


def test_a_decisive_write_carries_the_progress_and_is_not_training_only() -> None:
    job, pods, services = running_job()
    pods[1] = make_pod(job, "Worker", 1).failed(code=1).obj()  # restartPolicy Never: fails
    p = plan(job, pods, services, [reports(pods[0], [30])])
    assert p.status is not None and not p.training_only
    assert p.status["trainingProgress"]["step"] == 30
    assert p.status["conditions"][-1]["type"] == "Failed"


def test_pods_are_given_the_endpoint_token_and_ca() -> None:
    job = make_tfjob("mnist", "ns").worker(2).obj()
    pod, _ = compute_plan(Snapshot(read_job(job), (), [], at(0)), REPORTING).create_pods
    c = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert (
        env["TFJOB_PROGRESS_URL"]
        == "https://ctl.example:10443/v1/namespaces/ns/tfjobs/mnist/progress"
    )
    assert env["TFJOB_PROGRESS_TOKEN_FILE"] == "/var/run/secrets/tfjob.kubeflow.org/progress/token"
    assert env["TFJOB_PROGRESS_CA_FILE"] == "/var/run/secrets/tfjob.kubeflow.org/progress/ca.crt"
    assert "TF_CONFIG" in env
    assert c["volumeMounts"] == [
        {
            "name": "tfjob-progress",
            "mountPath": "/var/run/secrets/tfjob.kubeflow.org/progress",
            "readOnly": True,
        }
    ]
    (vol,) = pod["spec"]["volumes"]
    token, ca = vol["projected"]["sources"]
    assert token["serviceAccountToken"] == {
        "audience": "tfjob.kubeflow.org/ns/mnist",
        "expirationSeconds": 1200,
        "path": "token",
    }
    assert ca["configMap"]["name"] == "tfjob-progress-ca" and ca["configMap"]["optional"] is True


def test_nothing_is_given_when_off_opted_out_or_set_by_the_user() -> None:
    job = make_tfjob("mnist").worker(1).obj()
    (pod,) = compute_plan(Snapshot(read_job(job), (), [], at(0)), PlanConfig()).create_pods
    assert "volumes" not in pod["spec"]
    job["metadata"]["annotations"] = {"training.kubeflow.org/progress-reporting": "False"}
    (pod,) = compute_plan(Snapshot(read_job(job), (), [], at(0)), REPORTING).create_pods
    assert "volumes" not in pod["spec"]
    own = {
        "containers": [
            {
                "name": "tensorflow",
                "image": "i",
                "env": [{"name": "TFJOB_PROGRESS_URL", "value": "mine"}],
            }
        ]
    }
    job = make_tfjob("mnist").worker(2, template={"spec": own}).obj()
    pod, _ = compute_plan(Snapshot(read_job(job), (), [], at(0)), REPORTING).create_pods
    env = pod["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env] == ["TFJOB_PROGRESS_URL", "TF_CONFIG"] and env[0][
        "value"
    ] == "mine"
    assert own["containers"][0]["env"] == [{"name": "TFJOB_PROGRESS_URL", "value": "mine"}]
