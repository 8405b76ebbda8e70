"""Run policies and failure handling against the real cluster, one test per rule.

Every test asserts the pods, the services, the conditions (type, status, reason), the
replica counters (active/succeeded/failed/restarts/disruptions) and the timestamps. The
session controller runs with a short replacement backoff (0.5 s * 2^n, capped at 2 s; see
tests/cluster/conftest.py), so retries take well under a second.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.cluster.kube import (
    ControllerProcess,
    Kube,
    PodHistory,
    is_true,
    wait_for,
    wait_job,
    wait_running,
)
from tests.cluster.policy_helpers import (
    JobHistory,
    cond_of,
    make_job,
    parse_ts,
    phases,
    replaced_after_gone,
    rs,
    settled,
    svc_names,
    uid_of,
)
from tests.conftest import Cluster

#: needs kwok pods that exit on the test's say
pytestmark = pytest.mark.local_only


def _wait_kept(kube: Kube, ns: str, job: str, kept: dict[str, str]) -> None:
    """Wait until a failed job's pods are exactly the finished ones `kept` (name → phase),
    each with its service: its active pods are stopped even under cleanPodPolicy None."""

    def done() -> bool:
        return phases(kube, ns, job) == kept and svc_names(kube, ns, job) == sorted(kept)

    wait_for(done, 20, f"{job}: only {sorted(kept)} left")


RESTARTING = ("True", "TFJobRestarting")


def _status_time(job: dict[str, Any], key: str) -> float:
    return parse_ts(job["status"][key]).timestamp()


def _cond_time(job: dict[str, Any], type_: str) -> float:
    c = next(c for c in job["status"]["conditions"] if c["type"] == type_)
    return parse_ts(c["lastTransitionTime"]).timestamp()


def _reasons(kube: Kube, ns: str) -> list[tuple[str, str]]:
    """(type, reason) of the controller's events in the namespace (not the scheduler's)."""
    return [
        (e["type"], e["reason"])
        for e in kube.events(ns)
        if (e.get("source") or {}).get("component") == "tfjob-controller"
        or e.get("reportingComponent") == "tfjob-controller"
    ]


def _kill_and_wait_replaced(
    kube: Kube, history: PodHistory, ns: str, job: str, pod: str, code: int, n_pods: int
) -> str:
    old = uid_of(kube, ns, pod)
    kube.exit_pod(ns, pod, code)
    wait_for(
        lambda: any(t == "DELETED" and u == old for t, _, u in history.events),
        30,
        f"{pod} ({code}) deleted",
    )
    wait_running(kube, ns, job, n_pods)
    return replaced_after_gone(history, old, pod)


# --- ExitCode ------------------------------------------------------------------------------


def test_exit_code_policy(
    controller: ControllerProcess, kube: Kube, namespace: str, cluster: Cluster
) -> None:
    ns = namespace
    # (a) a permanent exit code (1) fails the job at once.
    kube.create_tfjob(ns, make_job("perm", workers=(2, "ExitCode")))
    # (b) retryable exit codes (137) are retried; the third one exceeds backoffLimit 2.
    kube.create_tfjob(
        ns, make_job("retry", workers=(2, "ExitCode"), run_policy={"backoffLimit": 2})
    )
    with PodHistory(cluster, ns) as pods, JobHistory(cluster, ns) as jobs:
        wait_running(kube, ns, "perm", 2)
        wait_running(kube, ns, "retry", 2)

        kube.exit_pod(ns, "perm-worker-1", 1)
        perm = wait_job(kube, ns, "perm", "Failed")
        assert cond_of(perm, "Failed") == (
            "True",
            "TFJobFailed",
            'job "perm" is failing because "Worker" replica(s) failed.',
        )
        assert cond_of(perm, "Running")[:2] == ("False", "TFJobRunning")  # type: ignore[index]
        assert cond_of(perm, "Restarting") is None
        assert rs(perm, "Worker") == {
            "active": 1,
            "succeeded": 0,
            "failed": 1,
            "restarts": 0,
            "disruptions": 0,
        }
        assert perm["status"]["replicaStatuses"]["Worker"]["failedIndexes"] == "1"
        assert _status_time(perm, "completionTime") >= _status_time(perm, "startTime")
        assert _cond_time(perm, "Failed") == _status_time(perm, "completionTime")
        # cleanPodPolicy defaults to None: the failed pod stays, with its service; a
        # failed job's running pod is stopped all the same (reconcile/policy/cleanup.py).
        _wait_kept(kube, ns, "perm", {"perm-worker-1": "Failed"})

        # First retryable failure: Restarting, replaced after the old pod is gone, Running.
        started = _status_time(kube.tfjob(ns, "retry") or {}, "startTime")
        for n in (1, 2):
            _kill_and_wait_replaced(kube, pods, ns, "retry", "retry-worker-1", 137, 2)
            job = wait_for(
                lambda n=n: (
                    (j := kube.tfjob(ns, "retry")) and rs(j, "Worker")["restarts"] == n and j
                ),
                10,
                f"restarts == {n}",
            )
            assert rs(job, "Worker") == {
                "active": 2,
                "succeeded": 0,
                "failed": 0,
                "restarts": n,
                "disruptions": 0,
            }
            assert is_true(job, "Running") and not is_true(job, "Failed")
            assert cond_of(job, "Restarting") is None  # Running and Restarting exclude each other
        seq = jobs.true_sequence("retry")
        assert seq == ["Created", "Running", "Restarting", "Running", "Restarting", "Running"], seq
        restarting = jobs.saw("retry", "Restarting", *RESTARTING)
        assert restarting is not None
        assert restarting["message"] == "job retry is restarting because Worker replica(s) failed."

        # The third retryable failure exceeds backoffLimit 2.
        kube.exit_pod(ns, "retry-worker-1", 137)
        failed = wait_job(kube, ns, "retry", "Failed")
        assert cond_of(failed, "Failed") == (
            "True",
            "TFJobFailed",
            "Job retry has failed because it has reached the specified backoff limit",
        )
        assert cond_of(failed, "Running")[0] == "False"  # type: ignore[index]
        assert rs(failed, "Worker")["restarts"] == 3
        assert rs(failed, "Worker")["failed"] == 0
        assert rs(failed, "Worker")["disruptions"] == 0
        assert _status_time(failed, "startTime") == started
        assert _status_time(failed, "completionTime") >= started
        settled(kube, controller, ns, "retry")
        # Nothing replaces the last failed pod; cleanPodPolicy None keeps it (the
        # running one is stopped: the job failed).
        _wait_kept(kube, ns, "retry", {"retry-worker-1": "Failed"})
    assert pods.violations == []
    wait_for(lambda: ("Warning", "TFJobRestarting") in _reasons(kube, ns), 10, "Restarting event")


# --- OnFailure: the kubelet restarts a failed container in place ---------------------------------


def _restarted(kube: Kube, ns: str, pod: str, uid: str, n: int) -> dict[str, Any] | None:
    """The pod once its container has been restarted in place ``n`` times (same UID)."""
    p = kube.pod(ns, pod)
    if not p or p["metadata"]["uid"] != uid:
        return None
    (cs,) = p["status"].get("containerStatuses") or [{}]
    return p if cs.get("restartCount", 0) >= n else None


def test_on_failure_in_place_restarts_count_against_backoff_limit(
    controller: ControllerProcess, kube: Kube, namespace: str, cluster: Cluster
) -> None:
    """A container that exits 137 under OnFailure is restarted in place, as a kubelet does
    (kwok's exit stage): the pod stays Running with restartCount up by one, nothing is
    deleted or created, and the controller counts each restart once, from restartCount.
    The second restart is past backoffLimit 1: the job fails with the backoff reason."""
    ns = namespace
    with PodHistory(cluster, ns) as history, JobHistory(cluster, ns) as jobs:
        kube.create_tfjob(
            ns, make_job("ipr", workers=(2, "OnFailure"), run_policy={"backoffLimit": 1})
        )
        wait_running(kube, ns, "ipr", 2)
        uid = uid_of(kube, ns, "ipr-worker-1")

        kube.exit_pod(ns, "ipr-worker-1", 137)
        pod = wait_for(lambda: _restarted(kube, ns, "ipr-worker-1", uid, 1), 10, "restart 1")
        (cs,) = pod["status"]["containerStatuses"]
        assert pod["status"]["phase"] == "Running"
        assert cs["restartCount"] == 1 and "running" in cs["state"], cs
        ended = cs["lastState"]["terminated"]
        assert (ended["exitCode"], ended["reason"]) == (137, "Error"), cs
        assert "kwok.test/exit-code" not in (pod["metadata"].get("annotations") or {})
        job = wait_for(
            lambda: (j := kube.tfjob(ns, "ipr")) and rs(j, "Worker")["restarts"] == 1 and j,
            10,
            "restarts == 1",
        )
        # Counted once, however many passes see the restarted pod; nothing replaced.
        settled(kube, controller, ns, "ipr")
        job = kube.tfjob(ns, "ipr")
        assert rs(job, "Worker") == {
            "active": 2,
            "succeeded": 0,
            "failed": 0,
            "restarts": 1,
            "disruptions": 0,
        }
        assert is_true(job, "Running") and not is_true(job, "Failed")
        assert sorted((t, n) for t, n, _ in history.events if t in ("ADDED", "DELETED")) == [
            ("ADDED", "ipr-worker-0"),
            ("ADDED", "ipr-worker-1"),
        ]

        # The second exit, asked for once the first restart is seen: restart 2, past
        # backoffLimit 1.
        kube.exit_pod(ns, "ipr-worker-1", 137)
        pod = wait_for(lambda: _restarted(kube, ns, "ipr-worker-1", uid, 2), 10, "restart 2")
        (cs,) = pod["status"]["containerStatuses"]
        assert (pod["status"]["phase"], cs["restartCount"]) == ("Running", 2)
        failed = wait_job(kube, ns, "ipr", "Failed")
        assert cond_of(failed, "Failed") == (
            "True",
            "TFJobFailed",
            "Job ipr has failed because it has reached the specified backoff limit",
        )
        assert rs(failed, "Worker")["restarts"] == 2
        assert (rs(failed, "Worker")["failed"], rs(failed, "Worker")["disruptions"]) == (0, 0)
        assert "Restarting" not in jobs.true_sequence("ipr")
        # A failed job's running pods are stopped (cleanPodPolicy None keeps only
        # finished ones); no pod was ever made in place of the restarted one.
        _wait_kept(kube, ns, "ipr", {})
        settled(kube, controller, ns, "ipr")
        assert rs(kube.tfjob(ns, "ipr"), "Worker")["restarts"] == 2
    assert history.violations == []
    assert sorted(n for t, n, _ in history.events if t == "ADDED") == [
        "ipr-worker-0",
        "ipr-worker-1",
    ]


# --- OnFailure: a pod deleted by someone else ---------------------------------------------------


def test_on_failure_deleted_pod_replaced_after_gone(
    controller: ControllerProcess, kube: Kube, namespace: str, cluster: Cluster
) -> None:
    ns = namespace
    kube.create_tfjob(ns, make_job("of", chief="Never", workers=(2, "OnFailure")))
    with PodHistory(cluster, ns) as history, JobHistory(cluster, ns) as jobs:
        wait_running(kube, ns, "of", 3)
        old = uid_of(kube, ns, "of-worker-1")
        # The program is still within its grace period (kwok's deletion stage holds a pod
        # annotated so, running and terminating) for as long as the test likes: the window
        # in which a replacement would overlap it.
        pod_path = f"/api/v1/namespaces/{ns}/pods/of-worker-1"
        hold = {"kwok.test/hold-on-delete": "1"}
        kube.req("PATCH", pod_path, {"metadata": {"annotations": hold}},
                 "application/merge-patch+json")  # fmt: skip
        kube.delete_pod(ns, "of-worker-1")
        # The controller has seen the terminating pod; its end is not known yet (it may
        # still exit 0 within its grace period), so nothing is counted yet ...
        settled(kube, controller, ns, "of")
        job = kube.tfjob(ns, "of")
        assert rs(job, "Worker")["disruptions"] == 0 and rs(job, "Worker")["restarts"] == 0
        # ... and nothing was created next to it while it terminates.
        assert phases(kube, ns, "of") == {
            "of-chief-0": "Running",
            "of-worker-0": "Running",
            "of-worker-1": "Running+T",
        }
        kube.req("PATCH", pod_path, {"metadata": {"annotations": {"kwok.test/hold-on-delete": None}}},
                 "application/merge-patch+json")  # fmt: skip
        # Killed at the end of its grace period (exit 137): a disruption, counted before
        # it is let go and replaced.
        job = wait_for(
            lambda: (j := kube.tfjob(ns, "of")) and rs(j, "Worker")["disruptions"] == 1 and j,
            10,
            "disruption counted",
        )
        assert rs(job, "Worker")["restarts"] == 0 and rs(job, "Worker")["failed"] == 0
        wait_for(
            lambda: (p := kube.pod(ns, "of-worker-1")) and p["metadata"]["uid"] != old,
            10,
            "replacement pod",
        )
        wait_running(kube, ns, "of", 3)
        new = replaced_after_gone(history, old, "of-worker-1")
        assert new != old
        job = wait_for(
            lambda: (j := kube.tfjob(ns, "of")) and rs(j, "Worker")["active"] == 2 and j,
            10,
            "worker active 2",
        )
    assert history.violations == []
    assert rs(job, "Worker") == {
        "active": 2,
        "succeeded": 0,
        "failed": 0,
        "restarts": 0,
        "disruptions": 1,
    }
    assert rs(job, "Chief") == {
        "active": 1,
        "succeeded": 0,
        "failed": 0,
        "restarts": 0,
        "disruptions": 0,
    }
    assert is_true(job, "Running") and cond_of(job, "Restarting") is None
    assert jobs.true_sequence("of") == ["Created", "Running", "Restarting", "Running"]
    assert svc_names(kube, ns, "of") == ["of-chief-0", "of-worker-0", "of-worker-1"]
    # The service was never touched: one create per index.
    assert [r for _, r in _reasons(kube, ns) if r.endswith("Service")] == [
        "SuccessfulCreateService"
    ] * 3


# --- backoffLimit across a controller restart --------------------------------------------------


def test_backoff_limit_survives_controller_restart(
    controller: ControllerProcess, kube: Kube, namespace: str, cluster: Cluster
) -> None:
    ns = namespace
    kube.create_tfjob(
        ns, make_job("bl", chief="Never", workers=(1, "ExitCode"), run_policy={"backoffLimit": 2})
    )
    with PodHistory(cluster, ns) as history:
        wait_running(kube, ns, "bl", 2)
        _kill_and_wait_replaced(kube, history, ns, "bl", "bl-worker-0", 137, 2)
        wait_for(lambda: rs(kube.tfjob(ns, "bl"), "Worker")["restarts"] == 1, 10, "restarts 1")

        controller.restart()  # SIGKILL, then a fresh process with an empty cache
        _kill_and_wait_replaced(kube, history, ns, "bl", "bl-worker-0", 137, 2)
        job = wait_for(
            lambda: (j := kube.tfjob(ns, "bl")) and rs(j, "Worker")["restarts"] == 2 and j,
            10,
            "restarts 2",
        )
        assert is_true(job, "Running")

        # The third failure happens while no controller runs; the new one must count it
        # on top of the two recorded in status, not start from zero.
        controller.stop()
        try:
            kube.exit_pod(ns, "bl-worker-0", 137)
            wait_for(
                lambda: (p := kube.pod(ns, "bl-worker-0")) and p["status"]["phase"] == "Failed",
                10,
                "worker failed",
            )
        finally:
            controller.start()
        failed = wait_job(kube, ns, "bl", "Failed")
    assert history.violations == []
    assert cond_of(failed, "Failed") == (
        "True",
        "TFJobFailed",
        "Job bl has failed because it has reached the specified backoff limit",
    )
    assert rs(failed, "Worker") == {
        "active": 0,
        "succeeded": 0,
        "failed": 0,
        "restarts": 3,
        "disruptions": 0,
    }
    assert rs(failed, "Chief")["active"] == 1
    assert _status_time(failed, "completionTime") >= _status_time(failed, "startTime")
    _wait_kept(kube, ns, "bl", {"bl-worker-0": "Failed"})


# --- Never --------------------------------------------------------------------------------------


def test_never_policy_worker_or_ps_failure_fails_job(
    controller: ControllerProcess, kube: Kube, namespace: str, cluster: Cluster
) -> None:
    ns = namespace
    with PodHistory(cluster, ns) as history:
        for name in ("nw", "nps"):
            job = make_job(name, chief="Never", ps=(1, "Never"), workers=(2, "Never"))
            kube.create_tfjob(ns, job)
        wait_running(kube, ns, "nw", 4)
        wait_running(kube, ns, "nps", 4)
        kube.exit_pod(ns, "nw-worker-1", 1)
        kube.exit_pod(ns, "nps-ps-0", 137)  # under Never even a signal is final
        nw = wait_job(kube, ns, "nw", "Failed")
        nps = wait_job(kube, ns, "nps", "Failed")
        settled(kube, controller, ns, "nw")
    assert history.violations == []
    assert cond_of(nw, "Failed") == (
        "True",
        "TFJobFailed",
        f"TFJob {ns}/nw has failed because 1 Worker replica(s) failed.",
    )
    assert cond_of(nps, "Failed") == (
        "True",
        "TFJobFailed",
        f"TFJob {ns}/nps has failed because 1 PS replica(s) failed.",
    )
    for job in (nw, nps):
        assert cond_of(job, "Running")[0] == "False"  # type: ignore[index]
        assert cond_of(job, "Restarting") is None
        assert _status_time(job, "completionTime") >= _status_time(job, "startTime")
    assert rs(nw, "Worker") == {
        "active": 1,
        "succeeded": 0,
        "failed": 1,
        "restarts": 0,
        "disruptions": 0,
    }
    assert rs(nw, "PS")["active"] == 1 and rs(nw, "Chief")["active"] == 1
    assert rs(nps, "PS") == {
        "active": 0,
        "succeeded": 0,
        "failed": 1,
        "restarts": 0,
        "disruptions": 0,
    }
    assert rs(nps, "Worker")["active"] == 2
    # Nothing was replaced; cleanPodPolicy None keeps the failed pods and their services,
    # and the failed jobs' running pods are stopped.
    _wait_kept(kube, ns, "nw", {"nw-worker-1": "Failed"})
    _wait_kept(kube, ns, "nps", {"nps-ps-0": "Failed"})
    assert sum(1 for t, _, _ in history.events if t == "ADDED") == 8


# --- activeDeadlineSeconds and ttlSecondsAfterFinished ------------------------------------------


def test_active_deadline_and_ttl(
    controller: ControllerProcess, kube: Kube, namespace: str, cluster: Cluster
) -> None:
    ns = namespace
    t0 = time.monotonic()
    kube.create_tfjob(
        ns,
        make_job(
            "ads",
            chief="Never",
            workers=(1, "OnFailure"),
            run_policy={"activeDeadlineSeconds": 5, "cleanPodPolicy": "All"},
        ),
    )
    wait_running(kube, ns, "ads", 2)
    # No pod changes from here on: only the controller's own timer can fail the job.
    failed = wait_job(kube, ns, "ads", "Failed", timeout=10)
    elapsed = time.monotonic() - t0
    assert 5 <= elapsed <= 7, elapsed
    assert cond_of(failed, "Failed") == (
        "True",
        "TFJobFailed",
        "Job ads has failed because it was active longer than specified deadline",
    )
    active_for = _status_time(failed, "completionTime") - _status_time(failed, "startTime")
    assert 5 <= active_for <= 7, active_for
    assert cond_of(failed, "Running")[0] == "False"  # type: ignore[index]
    assert rs(failed, "Worker")["failed"] == 0 and rs(failed, "Worker")["restarts"] == 0
    # cleanPodPolicy All: every pod and service goes.
    wait_for(lambda: kube.pods(ns, "ads") == [], 10, "ads pods gone")
    wait_for(lambda: kube.services(ns, "ads") == [], 10, "ads services gone")

    kube.create_tfjob(
        ns,
        make_job(
            "ttl",
            chief="Never",
            workers=(1, "OnFailure"),
            run_policy={"ttlSecondsAfterFinished": 3},
        ),
    )
    wait_running(kube, ns, "ttl", 2)
    t1 = time.monotonic()
    kube.exit_pod(ns, "ttl-chief-0", 0)
    done = wait_job(kube, ns, "ttl", "Succeeded")
    assert cond_of(done, "Succeeded") == (
        "True",
        "TFJobSucceeded",
        f"TFJob {ns}/ttl successfully completed.",
    )
    assert rs(done, "Chief")["succeeded"] == 1
    assert done["status"]["completionTime"]
    wait_for(lambda: kube.tfjob(ns, "ttl") is None, 10, "ttl job deleted")
    elapsed = time.monotonic() - t1
    assert 3 <= elapsed <= 5, elapsed
    # The garbage collector removes the children of the deleted job.
    wait_for(lambda: kube.pods(ns, "ttl") == [], 20, "ttl pods collected")
    wait_for(lambda: kube.services(ns, "ttl") == [], 20, "ttl services collected")
    wait_for(lambda: ("Normal", "SuccessfulDeleteJob") in _reasons(kube, ns), 10, "event")


# --- cleanPodPolicy ------------------------------------------------------------------------------


def test_clean_pod_policy_values(controller: ControllerProcess, kube: Kube, namespace: str) -> None:
    ns = namespace
    policies = {"none": "None", "running": "Running", "all": "All"}
    for name, policy in policies.items():
        kube.create_tfjob(
            ns,
            make_job(
                name,
                chief="Never",
                ps=(1, "Never"),
                workers=(2, "OnFailure"),
                run_policy={"cleanPodPolicy": policy},
            ),
        )
    for name in policies:
        wait_running(kube, ns, name, 4)
    for name in policies:
        kube.exit_pod(ns, f"{name}-chief-0", 0)
    jobs = {name: wait_job(kube, ns, name, "Succeeded") for name in policies}
    wait_for(lambda: kube.pods(ns, "all") == [], 10, "All: no pods")
    wait_for(lambda: kube.services(ns, "all") == [], 10, "All: no services")
    wait_for(lambda: list(phases(kube, ns, "running")) == ["running-chief-0"], 10, "Running: chief")
    wait_for(lambda: svc_names(kube, ns, "running") == ["running-chief-0"], 10, "Running: svc")
    for name in policies:
        settled(kube, controller, ns, name)

    assert phases(kube, ns, "none") == {
        "none-chief-0": "Succeeded",
        "none-ps-0": "Running",
        "none-worker-0": "Running",
        "none-worker-1": "Running",
    }
    assert svc_names(kube, ns, "none") == [
        "none-chief-0",
        "none-ps-0",
        "none-worker-0",
        "none-worker-1",
    ]
    assert phases(kube, ns, "running") == {"running-chief-0": "Succeeded"}
    assert svc_names(kube, ns, "running") == ["running-chief-0"]
    assert phases(kube, ns, "all") == {}
    assert svc_names(kube, ns, "all") == []
    for name, job in jobs.items():
        assert cond_of(job, "Succeeded")[:2] == ("True", "TFJobSucceeded")  # type: ignore[index]
        assert cond_of(job, "Running")[0] == "False"  # type: ignore[index]
        # The status is frozen at the moment the job finished: what was still active then
        # counts as succeeded (upstream's finished-job bookkeeping).
        final = kube.tfjob(ns, name)
        assert final is not None and final["status"] == job["status"], name
        assert rs(job, "Chief") == {
            "active": 0,
            "succeeded": 1,
            "failed": 0,
            "restarts": 0,
            "disruptions": 0,
        }
        assert rs(job, "PS")["succeeded"] == 1 and rs(job, "PS")["active"] == 0
        assert rs(job, "Worker")["succeeded"] == 2 and rs(job, "Worker")["active"] == 0
        assert _cond_time(job, "Succeeded") == _status_time(job, "completionTime")


# --- a finished job stays finished ----------------------------------------------------------------


def test_finished_job_with_deleted_pods_stays_finished(
    controller: ControllerProcess, kube: Kube, namespace: str, cluster: Cluster
) -> None:
    ns = namespace
    kube.create_tfjob(ns, make_job("ok", workers=(2, "OnFailure")))
    kube.create_tfjob(ns, make_job("bad", workers=(2, "Never")))
    wait_running(kube, ns, "ok", 2)
    wait_running(kube, ns, "bad", 2)
    kube.exit_pod(ns, "ok-worker-0", 0)  # worker 0 decides success without a chief
    kube.exit_pod(ns, "bad-worker-1", 1)
    ok = wait_job(kube, ns, "ok", "Succeeded")
    bad = wait_job(kube, ns, "bad", "Failed")
    # the failed job stops its running worker on its own first
    _wait_kept(kube, ns, "bad", {"bad-worker-1": "Failed"})
    with PodHistory(cluster, ns) as history:
        for p in kube.pods(ns):
            kube.delete_pod(ns, p["metadata"]["name"])
        wait_for(lambda: kube.pods(ns) == [], 10, "every pod gone")
        settled(kube, controller, ns, "ok")
        settled(kube, controller, ns, "bad")
        assert kube.pods(ns) == []
    assert [t for t, _, _ in history.events if t == "ADDED"] == []
    for name, before in (("ok", ok), ("bad", bad)):
        after = kube.tfjob(ns, name)
        assert after is not None
        assert after["status"] == before["status"], name
    assert svc_names(kube, ns, "ok") == ["ok-worker-0", "ok-worker-1"]
    # A failed job is cleaned up as under Running: a service goes with its pod.
    wait_for(lambda: svc_names(kube, ns, "bad") == [], 10, "bad: no services")
    assert cond_of(ok, "Succeeded")[:2] == ("True", "TFJobSucceeded")  # type: ignore[index]
    assert rs(ok, "Worker") == {
        "active": 0,
        "succeeded": 2,
        "failed": 0,
        "restarts": 0,
        "disruptions": 0,
    }
    assert cond_of(bad, "Failed")[:2] == ("True", "TFJobFailed")  # type: ignore[index]
    assert rs(bad, "Worker") == {
        "active": 1,
        "succeeded": 0,
        "failed": 1,
        "restarts": 0,
        "disruptions": 0,
    }


# --- suspend and resume ----------------------------------------------------------------------------


def test_suspend_then_resume(
    controller: ControllerProcess, kube: Kube, namespace: str, cluster: Cluster
) -> None:
    ns = namespace
    kube.create_tfjob(ns, make_job("sr", chief="Never", workers=(2, "OnFailure")))
    first = wait_running(kube, ns, "sr", 3)
    running = wait_job(kube, ns, "sr", "Running")
    first_start = _status_time(running, "startTime")
    first_uids = {p["metadata"]["uid"] for p in first}

    kube.patch_tfjob(ns, "sr", {"spec": {"runPolicy": {"suspend": True}}})
    suspended = wait_job(kube, ns, "sr", "Suspended")
    wait_for(lambda: kube.pods(ns, "sr") == [], 10, "pods removed")
    wait_for(lambda: kube.services(ns, "sr") == [], 10, "services removed")
    settled(kube, controller, ns, "sr")
    suspended = kube.tfjob(ns, "sr") or {}
    assert cond_of(suspended, "Suspended") == ("True", "TFJobSuspended", "TFJob sr is suspended.")
    assert cond_of(suspended, "Running") == ("False", "TFJobSuspended", "TFJob sr is suspended.")
    for rtype in ("Chief", "Worker"):
        assert rs(suspended, rtype) == {
            "active": 0,
            "succeeded": 0,
            "failed": 0,
            "restarts": 0,
            "disruptions": 0,
        }, rtype
    assert kube.pods(ns, "sr") == [] and kube.services(ns, "sr") == []

    # startTime has second precision: resume in a later second so the reset is visible.
    wait_for(lambda: time.time() >= first_start + 1.05, 3, "next second")
    kube.patch_tfjob(ns, "sr", {"spec": {"runPolicy": {"suspend": False}}})
    resumed = wait_for(
        lambda: (
            (j := kube.tfjob(ns, "sr"))
            and cond_of(j, "Suspended") == ("False", "TFJobResumed", "TFJob sr is resumed.")
            and j
        ),
        10,
        "resumed",
    )
    again = wait_running(kube, ns, "sr", 3)
    assert {p["metadata"]["uid"] for p in again}.isdisjoint(first_uids)
    wait_for(lambda: len(kube.services(ns, "sr")) == 3, 10, "services recreated")
    job = wait_for(
        lambda: (j := kube.tfjob(ns, "sr")) and rs(j, "Worker")["active"] == 2 and j,
        10,
        "active again",
    )
    assert _status_time(resumed, "startTime") > first_start
    assert _status_time(job, "startTime") == _status_time(resumed, "startTime")
    assert _cond_time(job, "Suspended") == _status_time(job, "startTime")
    assert cond_of(job, "Running")[:2] == ("True", "TFJobRunning")  # type: ignore[index]
    assert rs(job, "Worker") == {
        "active": 2,
        "succeeded": 0,
        "failed": 0,
        "restarts": 0,
        "disruptions": 0,
    }
    assert rs(job, "Chief")["active"] == 1
    assert "completionTime" not in job["status"]
    for reason in ("TFJobSuspended", "TFJobResumed"):
        wait_for(lambda r=reason: ("Normal", r) in _reasons(kube, ns), 10, f"{reason} event")
