"""Stalls and the restart guard through compute_plan, on a fake clock (docs/stalls.md):
the deadlines' edges, what does not count (not Running, suspended, restarting), progress
resuming, a failover that keeps the times, the actions, and the guard's counting."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reconcile.api.names import (
    FIRST_PROGRESS_DEADLINE_ANNOTATION,
    GANG_EPOCH_LABEL,
    PROGRESS_DEADLINE_ANNOTATION,
    RESTART_GUARD_ANNOTATION,
    STALL_ACTION_ANNOTATION,
    STRAGGLER_ACTION_ANNOTATION,
)
from reconcile.api.spec import read_job
from reconcile.api.status_types import format_time
from reconcile.plan import Plan, PlanConfig, Snapshot, compute_plan
from reconcile.policy.gang import Gang, GangKind, desired_podgroup
from reconcile.progress.records import ReplicaRecord, Reporter, known_step, record
from reconcile.progress.wire import Report
from tests.builders import at, make_tfjob
from tests.unit.reconcile.test_plan import World, cond, cond_types

TYPES = {"worker": "Worker", "chief": "Chief", "ps": "PS"}
VOLCANO = Gang(GangKind.VOLCANO, "volcano")


@dataclass
class Reporting(World):
    """The world, and the controller's intake: each replica's record, as the reports
    arrive (reconcile.sync.progress does the same with the same functions)."""

    held: dict[tuple[str, int], ReplicaRecord] = field(default_factory=dict)
    #: every replica reports from node-a; node-b is where a moved one may go
    nodes: list[dict[str, Any]] | None = field(
        default_factory=lambda: [{"metadata": {"name": n}} for n in ("node-a", "node-b")]
    )

    def report(self, pod_name: str, step: int, sections: dict[str, float] | None = None) -> None:
        meta = self.pods[pod_name]["metadata"]
        labels = meta["labels"]
        rtype = TYPES[labels["training.kubeflow.org/replica-type"]]
        index = int(labels["training.kubeflow.org/replica-index"])
        who = Reporter(rtype, index, pod_name, meta["uid"], "node-a")
        prev = self.held.get((rtype, index))
        baseline = None
        if prev is None:
            baseline = known_step(self.status.get("trainingProgress"), rtype, index)
        report = Report(step=step, sections=sections or {})
        self.held[(rtype, index)] = record(prev, who, report, at(self.now), baseline)
        self.training = tuple(self.held.values())

    def failover(self) -> None:
        """A new leader: nothing in memory but what the status says."""
        self.held = {}
        self.training = ()


def watched(**annotations: str) -> dict[str, Any]:
    job = make_tfjob("m").worker(2, restart_policy="ExitCode").obj()
    job["metadata"]["annotations"] = annotations
    return job


def running(job: dict[str, Any], at_second: float = 10) -> Reporting:
    w = Reporting(job)
    w.reconcile()
    w.run_all()
    w.now = at_second
    w.reconcile()
    assert cond(w.status, "Running")["status"] == "True"
    return w


def stalled(w: Reporting) -> dict[str, Any] | None:
    found = [c for c in w.status.get("conditions", []) if c["type"] == "Stalled"]
    return found[0] if found else None


def at_(w: Reporting, second: float) -> Plan:
    w.now = second
    return w.reconcile()


def reported(w: Reporting, second: float, *steps: tuple[str, int]) -> Plan:
    """At ``second`` these pods report these steps, and the pass they bring runs."""
    w.now = second
    for name, step in steps:
        w.report(name, step)
    return w.reconcile()


DEADLINE = {PROGRESS_DEADLINE_ANNOTATION: "60"}  # first progress: 3 x 60 s


# --- the deadlines ----------------------------------------------------------------------


def test_first_progress_deadline_counts_from_running_and_names_its_reason() -> None:
    w = running(watched(**DEADLINE), at_second=10)
    assert w.last is not None and w.last.requeue_after == 180  # a timer, not polling
    assert at_(w, 189).status is None and stalled(w) is None
    assert at_(w, 189).requeue_after == 1
    p = at_(w, 190)
    c = stalled(w)
    assert c is not None and (c["status"], c["reason"]) == ("True", "FirstProgressDeadlineExceeded")
    assert (
        "Running for 3m0s with no progress reported (first-progress deadline 180s)" in c["message"]
    )
    # first in the list: the State column and the SDK still read Running
    assert w.status["conditions"][0]["type"] == "Stalled"
    assert cond_types(w.status)[-1] == ("Running", "True")
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "FirstProgressDeadlineExceeded")]
    # stalled: nothing more to time, and no write again
    assert at_(w, 200).status is None


def test_progress_deadline_counts_from_the_last_step_that_advanced() -> None:
    w = running(watched(**DEADLINE))
    reported(w, 20, ("m-worker-0", 1), ("m-worker-1", 1))
    assert reported(w, 25, ("m-worker-0", 5), ("m-worker-1", 5)).requeue_after == 60
    # the same step again is no progress
    for t in (40, 60, 80):
        w.now = t
        w.report("m-worker-0", 5)
        w.report("m-worker-1", 5)
        w.reconcile()
    assert w.status["trainingProgress"]["lastProgressTime"] == format_time(at(25))
    assert at_(w, 84).status is None or stalled(w) is None
    p = at_(w, 85)
    c = stalled(w)
    assert c is not None and c["reason"] == "ProgressDeadlineExceeded"
    assert "made no progress for 1m0s (progress deadline 60s)" in c["message"]
    assert f"worker-0 at step 5 since {format_time(at(25))} on node-a" in c["message"]
    assert ("Warning", "ProgressDeadlineExceeded") in [(e.type, e.reason) for e in p.events]
    # a step advances: resumed, with a Normal event
    p = reported(w, 100, ("m-worker-1", 6))
    c = stalled(w)
    assert c is not None and (c["status"], c["reason"]) == ("False", "ProgressResumed")
    assert ("Normal", "ProgressResumed") in [(e.type, e.reason) for e in p.events]
    assert p.requeue_after == 60


def test_an_advance_before_the_deadline_sets_nothing() -> None:
    w = running(watched(**DEADLINE))
    reported(w, 20, ("m-worker-0", 1))
    assert reported(w, 79, ("m-worker-0", 2)).requeue_after == 60
    assert at_(w, 138).status is None or stalled(w) is None
    assert stalled(w) is None


def test_no_deadline_no_check_and_no_timer() -> None:
    w = running(watched())
    reported(w, 20, ("m-worker-0", 1))
    assert at_(w, 10_000).requeue_after is None and stalled(w) is None


def test_a_job_that_is_not_running_is_not_timed() -> None:
    w = Reporting(watched(**DEADLINE))
    w.reconcile()  # created, pods pending: the clock has not started
    assert at_(w, 1_000).requeue_after is None and stalled(w) is None
    w.run_all()
    assert at_(w, 1_001).status is not None  # Running now
    assert at_(w, 1_180).status is None and stalled(w) is None
    at_(w, 1_181)
    assert stalled(w) is not None


def test_suspended_time_does_not_count_and_a_resume_starts_the_clock_again() -> None:
    job = watched(**DEADLINE)
    w = running(job, at_second=10)
    reported(w, 20, ("m-worker-0", 3))
    w.job["spec"]["runPolicy"] = {"suspend": True}
    at_(w, 30)
    w.gone()
    assert cond(w.status, "Suspended")["status"] == "True"
    assert at_(w, 500).requeue_after is None and stalled(w) is None  # suspended for long
    w.job["spec"]["runPolicy"] = {"suspend": False}
    at_(w, 600)
    w.run_all()
    at_(w, 601)
    assert cond(w.status, "Running")["status"] == "True"
    # the last progress (20) was before this run: the first-progress deadline applies
    assert w.last is not None and w.last.requeue_after == 180
    assert at_(w, 780).status is None or stalled(w) is None
    at_(w, 781)
    c = stalled(w)
    assert c is not None and c["reason"] == "FirstProgressDeadlineExceeded"


def test_a_new_leader_counts_from_the_stored_times() -> None:
    w = running(watched(**DEADLINE))
    reported(w, 20, ("m-worker-0", 7))
    w.failover()
    # no report since: the deadline still runs from 20
    assert at_(w, 50).requeue_after == 30
    # a report of the step the status shows is no progress to the new leader
    reported(w, 70, ("m-worker-0", 7))
    at_(w, 80)
    c = stalled(w)
    assert c is not None and c["reason"] == "ProgressDeadlineExceeded"
    # one past it is
    w.failover()
    reported(w, 90, ("m-worker-0", 8))
    c = stalled(w)
    assert c is not None and c["reason"] == "ProgressResumed"


def test_a_separate_first_deadline_and_none_after_the_first_report() -> None:
    w = running(watched(**{FIRST_PROGRESS_DEADLINE_ANNOTATION: "30"}))
    assert w.last is not None and w.last.requeue_after == 30
    assert (
        reported(w, 20, ("m-worker-0", 1)).requeue_after is None
    )  # reported: no progress deadline set
    assert at_(w, 10_000).requeue_after is None and stalled(w) is None


# --- the actions ------------------------------------------------------------------------


def test_restart_action_restarts_the_gang_counted_once_and_times_the_new_run() -> None:
    w = running(watched(**DEADLINE, **{STALL_ACTION_ANNOTATION: "restart"}))
    reported(w, 20, ("m-worker-0", 4))
    p = at_(w, 80)
    assert w.status["gangEpoch"] == 1
    assert w.status["replicaStatuses"]["Worker"]["restarts"] == 1
    restarting = cond(w.status, "Restarting")
    assert restarting["status"] == "True" and "made no progress for 1m0s" in restarting["message"]
    c = stalled(w)
    assert c is not None and (c["status"], c["reason"]) == ("False", "GangRestarted")
    assert [(e.type, e.reason) for e in p.events] == [
        ("Warning", "ProgressDeadlineExceeded"),
        ("Warning", "TFJobRestarting"),
    ]
    # the old epoch goes, the new one comes, all together
    assert len(at_(w, 81).delete_pods) == 2
    w.gone()
    p = at_(w, 82)
    assert {x["metadata"]["labels"][GANG_EPOCH_LABEL] for x in p.create_pods} == {"1"}
    assert at_(w, 90).requeue_after is None  # pending: not Running, not timed
    w.run_all()
    at_(w, 100)
    assert cond(w.status, "Running")["status"] == "True"
    assert w.last is not None and w.last.requeue_after == 180  # first progress again
    # the new pods resume below the stored step: not progress yet; then they advance
    reported(w, 110, ("m-worker-0", 2))
    assert reported(w, 120, ("m-worker-0", 3)).requeue_after == 60
    assert stalled(w)["status"] == "False"  # type: ignore[index]


def test_restart_action_over_the_backoff_limit_fails_by_the_limit() -> None:
    job = watched(**DEADLINE, **{STALL_ACTION_ANNOTATION: "restart"})
    job["spec"]["runPolicy"] = {"backoffLimit": 0}
    w = running(job)
    reported(w, 20, ("m-worker-0", 4))
    at_(w, 80)
    failed = cond(w.status, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "TFJobFailed")
    assert "backoff limit" in failed["message"]
    assert w.status.get("gangEpoch", 0) == 0
    c = stalled(w)
    assert c is not None and c["status"] == "True"


def test_fail_action_fails_the_job_with_its_own_reason() -> None:
    w = running(watched(**DEADLINE, **{STALL_ACTION_ANNOTATION: "fail"}))
    reported(w, 20, ("m-worker-0", 4))
    p = at_(w, 80)
    failed = cond(w.status, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "TFJobStalled")
    assert (
        "made no progress for 1m0s (progress deadline 60s) (stall action fail)" in failed["message"]
    )
    assert stalled(w)["status"] == "True"  # type: ignore[index]
    assert ("Warning", "TFJobStalled") in [(e.type, e.reason) for e in p.events]


def test_a_deadline_run_out_while_the_endpoint_was_deaf_fails_nothing() -> None:
    w = running(watched(**DEADLINE, **{STALL_ACTION_ANNOTATION: "fail"}))
    reported(w, 20, ("m-worker-0", 4))
    w.unheard = (at(70), "every connection slot is taken")
    p = at_(w, 80)
    assert ("Failed", "True") not in cond_types(w.status)
    c = stalled(w)
    assert c is not None and (c["status"], c["reason"]) == ("False", "ProgressUnheard")
    assert "every connection slot is taken" in c["message"]
    assert ("Warning", "ProgressUnheard") in [(e.type, e.reason) for e in p.events]
    assert p.requeue_after == 50  # a deadline from the window's end
    # reports resume: it is progress again, and the deadline counts from them
    reported(w, 100, ("m-worker-0", 5))
    assert stalled(w)["status"] == "False"  # type: ignore[index]
    # silence after the window runs out as any other
    at_(w, 160)
    failed = cond(w.status, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "TFJobStalled")


def test_report_action_leaves_the_job_running() -> None:
    w = running(watched(**DEADLINE, **{STALL_ACTION_ANNOTATION: "report"}))
    at_(w, 190)
    assert stalled(w)["status"] == "True"  # type: ignore[index]
    assert cond_types(w.status)[-1] == ("Running", "True")
    assert w.status.get("gangEpoch", 0) == 0 and at_(w, 191).delete_pods == []


# --- the restart guard ------------------------------------------------------------------


def crash(w: Reporting, name: str, second: float) -> None:
    """The pod fails (137, retried under ExitCode) and is replaced, running again."""
    w.now = second
    w.set_phase(name, "Failed", 137)
    w.reconcile()
    w.now = second + 1
    w.reconcile()
    w.gone()
    w.now = second + 300  # past any backoff
    w.reconcile()
    w.run_all()
    w.now = second + 301
    w.reconcile()


def test_restarts_without_progress_fail_the_job_after_the_guard() -> None:
    w = running(watched(**{RESTART_GUARD_ANNOTATION: "2"}))
    reported(w, 20, ("m-worker-0", 50))
    crash(w, "m-worker-0", 100)  # restart 1: the run begins at step 50
    assert w.status["restartGuard"] == {"sinceStep": 50}
    w.report("m-worker-0", 40)  # resumed from a checkpoint, below 50
    crash(w, "m-worker-0", 1_000)  # restart 2: one restarted run ended without progress
    assert "Failed" not in [t for t, s in cond_types(w.status) if s == "True"]
    w.report("m-worker-0", 45)
    w.now = 2_000
    w.set_phase("m-worker-0", "Failed", 137)  # restart 3: the second: the guard trips
    p = w.reconcile()
    failed = cond(w.status, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "TFJobRestartsWithoutProgress")
    assert failed["message"] == (
        "TFJob m has failed: it restarted 2 times in a row and no replica's step got past"
        " 50, the furthest before the first of those restarts"
        " (training.kubeflow.org/restart-guard: 2)."
    )
    assert ("Warning", "TFJobRestartsWithoutProgress") in [(e.type, e.reason) for e in p.events]


def test_progress_past_the_mark_begins_a_new_run() -> None:
    w = running(watched(**{RESTART_GUARD_ANNOTATION: "2"}))
    reported(w, 20, ("m-worker-0", 50))
    crash(w, "m-worker-0", 100)
    w.report("m-worker-0", 40)
    w.now = 500
    w.report("m-worker-0", 60)  # past 50: progress
    w.reconcile()
    crash(w, "m-worker-0", 1_000)
    assert w.status["restartGuard"] == {"sinceStep": 60, "sinceRestarts": 1}
    crash(w, "m-worker-0", 2_000)
    assert all(c["type"] != "Failed" for c in w.status["conditions"])


def test_one_replicas_absurd_step_does_not_pin_the_guards_mark() -> None:
    job = make_tfjob("m").worker(3, restart_policy="ExitCode").obj()
    job["metadata"]["annotations"] = {RESTART_GUARD_ANNOTATION: "2"}
    w = running(job)
    reported(w, 20, ("m-worker-0", 50), ("m-worker-1", 50), ("m-worker-2", 2**53))
    assert w.status["trainingProgress"]["furthestStep"] == 50
    step = 50
    for t in (100, 1_000, 2_000, 3_000, 4_000):
        crash(w, "m-worker-0", t)
        step += 10  # every restart resumes and gets further
        reported(w, t + 400, ("m-worker-0", step), ("m-worker-1", step))
    assert w.status["replicaStatuses"]["Worker"]["restarts"] == 5
    assert all(c["type"] != "Failed" for c in w.status["conditions"])
    assert w.status["trainingProgress"]["furthestStep"] == step


def test_a_job_that_never_reported_is_left_to_the_backoff_limit() -> None:
    w = running(watched(**{RESTART_GUARD_ANNOTATION: "1"}))
    for t in (100, 1_000, 2_000, 3_000):
        crash(w, "m-worker-0", t)
    assert w.status["replicaStatuses"]["Worker"]["restarts"] == 4
    assert "restartGuard" not in w.status
    assert all(c["type"] != "Failed" for c in w.status["conditions"])


def test_the_guard_off_never_trips() -> None:
    w = running(watched(**{RESTART_GUARD_ANNOTATION: "0"}))
    reported(w, 20, ("m-worker-0", 50))
    for t in (100, 1_000, 2_000, 3_000):
        crash(w, "m-worker-0", t)
    assert all(c["type"] != "Failed" for c in w.status["conditions"])


# --- costs and bad values -----------------------------------------------------------------


def test_a_job_without_reports_or_annotations_writes_what_it_always_wrote() -> None:
    plain = running(make_tfjob("m").worker(2, restart_policy="ExitCode").obj())
    guarded = running(watched(**{RESTART_GUARD_ANNOTATION: "3"}))
    for w in (plain, guarded):
        for t in range(20, 2_000, 97):
            at_(w, t)
    assert plain.status_writes == guarded.status_writes == 2
    assert plain.status == guarded.status


def test_a_bad_value_fails_the_job_naming_the_annotation() -> None:
    w = Reporting(watched(**{STALL_ACTION_ANNOTATION: "Restart!"}))
    w.reconcile()
    failed = cond(w.status, "Failed")
    assert failed["reason"] == "TFJobFailedValidation"
    assert (
        "metadata.annotations[training.kubeflow.org/stall-action]: must be one of report,"
        " restart, fail, not 'Restart!'" in failed["message"]
    )
    w = Reporting(watched(**{PROGRESS_DEADLINE_ANNOTATION: "-5"}))
    w.reconcile()
    assert (
        "progress-deadline-seconds]: must be a whole number from 1 to 2592000"
        in (cond(w.status, "Failed")["message"])
    )


# --- moving a straggler ---------------------------------------------------------------


def slow_last(w: Reporting, start: float, rounds: int = 5) -> None:
    """Workers 0 to 2 step 50 every 5 s, worker 3 only 10: it runs at a fifth."""
    for n in range(rounds):
        w.now = start + 5 * n
        for i, per in ((0, 50), (1, 50), (2, 50), (3, 10)):
            w.report(f"m-worker-{i}", (n + 1) * per)
        w.reconcile()


def four(**annotations: str) -> dict[str, Any]:
    """Four workers: a move needs three peers to compare with."""
    job = make_tfjob("m").worker(4, restart_policy="ExitCode").obj()
    job["metadata"]["annotations"] = annotations
    return job


def avoidance(pod: dict[str, Any]) -> list[Any]:
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    return [e for t in terms["nodeSelectorTerms"] for e in t["matchFields"]]


def test_a_straggler_with_no_other_node_to_go_to_stays_where_it_is() -> None:
    for nodes in ([{"metadata": {"name": "node-a"}}], None):  # the only node; none known
        w = running(four(**{STRAGGLER_ACTION_ANNOTATION: "move"}))
        w.nodes = nodes
        slow_last(w, 20)
        (s,) = w.status["trainingProgress"]["stragglers"]
        assert s["index"] == 3
        rs = w.status["replicaStatuses"]["Worker"]
        assert not rs.get("moves") and not rs.get("indexRetries")
        assert not [n for n, x in w.pods.items() if x["metadata"].get("deletionTimestamp")]
        assert "StragglerMoved" not in [e.reason for e in w.events]


def test_a_flagged_straggler_is_moved_once_not_counted_and_kept_off_its_node() -> None:
    w = running(four(**{STRAGGLER_ACTION_ANNOTATION: "move"}))
    slow_last(w, 20)
    rs = w.status["replicaStatuses"]["Worker"]
    assert rs["moves"] == 1 and rs["indexRetries"]["3"]["avoidNodes"] == ["node-a"]
    moving = rs["indexRetries"]["3"]["movingPodUID"]
    assert moving == w.pods["m-worker-3"]["metadata"]["uid"]
    reasons = [e.reason for e in w.events]
    assert reasons.count("StragglerMoved") == 1 and reasons.count("StragglerDetected") == 1
    # the move stored (the pass after it): the pod goes; its end counts for nothing
    going = [n for n, x in w.pods.items() if x["metadata"].get("deletionTimestamp")]
    assert going == ["m-worker-3"]
    # and let go (its tracking finalizer off): nothing of its end is waited for
    assert not w.pods["m-worker-3"]["metadata"].get("finalizers")
    w.set_phase("m-worker-3", "Failed", 143)
    at_(w, 42)
    w.gone()
    p = at_(w, 43)
    (new,) = p.create_pods
    assert new["metadata"]["name"] == "m-worker-3"
    assert avoidance(new) == [{"key": "metadata.name", "operator": "NotIn", "values": ["node-a"]}]
    rs = w.status["replicaStatuses"]["Worker"]
    assert rs.get("restarts", 0) == 0 and rs.get("disruptions", 0) == 0 and rs["moves"] == 1
    assert "movingPodUID" not in rs["indexRetries"]["3"]
    # its replacement is slow too, within the window: flagged, not moved again
    w.run_all()
    at_(w, 44)
    slow_last(w, 60)
    assert w.status["replicaStatuses"]["Worker"]["moves"] == 1
    assert [x for x in w.status["trainingProgress"]["stragglers"] if x["index"] == 3]
    # after the window: moved again, the node not listed twice
    slow_last(w, 700)
    rs = w.status["replicaStatuses"]["Worker"]
    assert rs["moves"] == 2 and rs["indexRetries"]["3"]["avoidNodes"] == ["node-a"]
    assert rs["indexRetries"]["3"]["moves"] == 2
    # the index's budget spent: flagged, never moved again
    w.set_phase("m-worker-3", "Failed", 143)
    at_(w, 730)
    w.gone()
    at_(w, 731)
    w.run_all()
    at_(w, 732)
    for start in (1_400, 2_100, 2_800):
        slow_last(w, start)
    rs = w.status["replicaStatuses"]["Worker"]
    assert rs["moves"] == 2 and rs["indexRetries"]["3"]["moves"] == 2
    assert [x["index"] for x in w.status["trainingProgress"]["stragglers"]] == [3]


def test_a_replica_reporting_nothing_gets_no_peer_moved() -> None:
    """One of three workers says its compute takes no time (the issue's case): its
    honest peers are neither flagged nor moved, window after window."""
    job = make_tfjob("m").worker(3, restart_policy="ExitCode").obj()
    job["metadata"]["annotations"] = {STRAGGLER_ACTION_ANNOTATION: "move"}
    w = running(job)
    for start in (20, 700, 1_400):
        for n in range(5):
            w.now = start + 5 * n
            w.report("m-worker-0", n + 1, {"compute": 0.0})
            for i in (1, 2):
                w.report(f"m-worker-{i}", n + 1, {"compute": 0.08 + 0.001 * i})
            w.reconcile()
    assert w.status["replicaStatuses"]["Worker"].get("moves", 0) == 0
    assert w.status["trainingProgress"].get("stragglers", []) == []


def test_under_whole_gang_restart_a_move_restarts_the_gang_uncounted() -> None:
    w = running(
        four(**{STRAGGLER_ACTION_ANNOTATION: "move", "training.kubeflow.org/gang-restart": "true"})
    )
    slow_last(w, 20)
    assert w.status["gangEpoch"] == 1
    rs = w.status["replicaStatuses"]["Worker"]
    assert rs["moves"] == 1 and rs.get("restarts", 0) == 0
    assert "movingPodUID" not in rs["indexRetries"]["3"]
    assert "straggler" in cond(w.status, "Restarting")["message"]
    at_(w, 41)
    assert all(x["metadata"].get("deletionTimestamp") for x in w.pods.values())
    w.gone()
    p = at_(w, 42)
    made = {x["metadata"]["name"]: x for x in p.create_pods}
    assert sorted(made) == ["m-worker-0", "m-worker-1", "m-worker-2", "m-worker-3"]
    assert avoidance(made["m-worker-3"])[0]["values"] == ["node-a"]
    assert "affinity" not in made["m-worker-0"]["spec"]


def test_report_only_flags_and_never_moves() -> None:
    w = running(four())
    slow_last(w, 20)
    assert [x["index"] for x in w.status["trainingProgress"]["stragglers"]] == [3]
    assert w.status["replicaStatuses"]["Worker"].get("moves", 0) == 0
    assert at_(w, 41).delete_pods == []


def test_waiting_for_the_gang_to_be_admitted_does_not_count() -> None:
    job = watched(**DEADLINE)
    cfg = PlanConfig(gang=VOLCANO)
    pg = desired_podgroup(read_job(job).tfjob, VOLCANO, {})  # type: ignore[arg-type]
    pg["metadata"]["uid"] = "pg-uid"
    pg["status"] = {"phase": "Pending"}
    for t in (0, 1_000, 100_000):  # however long it waits
        snap = Snapshot(read_job(job), (), [], at(t), podgroup=pg)
        plan = compute_plan(snap, cfg)
        if plan.status is not None:
            job["status"] = plan.status
        assert plan.create_pods == [] and plan.requeue_after is None
    assert [c["type"] for c in job["status"]["conditions"]] == ["GangAdmitted", "Created"]


def test_no_move_while_a_pod_of_the_job_is_away() -> None:
    w = running(four(**{STRAGGLER_ACTION_ANNOTATION: "move"}))
    w.pods["m-worker-0"]["status"]["phase"] = "Pending"  # say, a moved one, unscheduled
    slow_last(w, 20)
    assert [x["index"] for x in w.status["trainingProgress"]["stragglers"]] == [3]
    assert w.status["replicaStatuses"]["Worker"].get("moves", 0) == 0


def test_a_moved_pod_that_vanishes_is_no_disruption() -> None:
    w = running(four(**{STRAGGLER_ACTION_ANNOTATION: "move"}))
    slow_last(w, 20, rounds=4)  # the move is recorded in the last of them
    assert w.status["replicaStatuses"]["Worker"]["indexRetries"]["3"]["movingPodUID"]
    del w.pods["m-worker-3"]  # gone before any pass saw it terminating
    (new,) = at_(w, 41).create_pods
    assert new["metadata"]["name"] == "m-worker-3" and avoidance(new)
    rs = w.status["replicaStatuses"]["Worker"]
    assert rs.get("disruptions", 0) == 0 and rs.get("restarts", 0) == 0
