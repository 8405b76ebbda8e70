"""Collateral ends (reconcile.policy.collateral, through compute_plan): a survivor's exit 1
after its peer was killed never fails a whole-gang-restart job, whichever end is seen
first; without whole-gang restart it fails the job with a Warning event that says why."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from reconcile.objects.observed import ObservedPod
from reconcile.policy.collateral import Ends, Trouble, collateral
from tests.builders import at, make_pod, ts
from tests.unit.reconcile.policy.test_gang_restart import gang_job, rs, running_world
from tests.unit.reconcile.test_plan import CFG, World, cond

WINDOW = timedelta(seconds=20)


def failed(w: World) -> bool:
    return any(c["type"] == "Failed" and c["status"] == "True" for c in w.status["conditions"])


def plain_job() -> dict[str, Any]:
    job = gang_job()
    job["metadata"]["annotations"] = {}
    return job


def test_survivor_seen_with_the_killed_peer_joins_the_gang_restart() -> None:
    w = running_world(gang_job())
    w.now = 20
    w.set_phase("g-worker-1", "Failed", 137)
    w.now = 23
    w.set_phase("g-worker-0", "Failed", 1)
    w.now = 24
    w.reconcile()
    assert not failed(w)
    assert w.status["gangEpoch"] == 1 and rs(w, "Worker")["restarts"] == 1
    assert rs(w, "Worker").get("failed", 0) == 0
    w.now = 25
    p = w.reconcile()  # every pod of the old epoch goes, the collateral one too
    assert {x["metadata"]["name"] for x in p.delete_pods} == set(w.pods)
    w.gone()
    w.now = 31
    p = w.reconcile()
    assert len(p.create_pods) == 3 and not failed(w)


def test_survivor_seen_before_the_killed_peer_is_held_until_the_peer_ends() -> None:
    w = running_world(gang_job())
    w.now = 20
    w.set_phase("g-worker-1", "Failed", 137)  # the kill: its end not reported yet
    w.pods["g-worker-1"]["status"]["phase"] = "Running"
    w.now = 23
    w.set_phase("g-worker-0", "Failed", 1)
    p = w.reconcile()
    assert not failed(w)
    assert p.requeue_after == pytest.approx(20)  # held: 20 s from its end
    assert rs(w, "Worker").get("failed", 0) == 0
    w.now = 25
    w.pods["g-worker-1"]["status"]["phase"] = "Failed"  # finished at 20, seen at 25
    w.reconcile()
    assert not failed(w)
    assert w.status["gangEpoch"] == 1 and rs(w, "Worker")["restarts"] == 1


def test_a_held_end_fails_the_job_when_no_peer_end_arrives() -> None:
    w = running_world(gang_job())
    w.now = 20
    w.set_phase("g-worker-0", "Failed", 1)
    p = w.reconcile()
    assert not failed(w) and p.requeue_after == pytest.approx(20)
    w.now = 39
    assert w.reconcile().requeue_after == pytest.approx(1)
    assert not failed(w)
    w.now = 40
    w.reconcile()
    assert failed(w)
    assert cond(w.status, "Failed")["reason"] == "TFJobFailed"
    assert w.status.get("gangEpoch", 0) == 0


def test_an_end_before_the_peers_kill_is_the_programs_own() -> None:
    w = running_world(gang_job())
    w.now = 20
    w.set_phase("g-worker-0", "Failed", 1)
    w.now = 22
    w.set_phase("g-worker-1", "Failed", 137)
    w.now = 23
    w.reconcile()
    assert failed(w)
    assert w.status.get("gangEpoch", 0) == 0


def test_an_end_long_after_the_peers_trouble_is_the_programs_own() -> None:
    w = running_world(gang_job())
    w.now = 20
    # deleted by someone else with a long grace period, still running
    w.pods["g-worker-1"]["metadata"]["deletionTimestamp"] = ts(320)
    w.pods["g-worker-1"]["metadata"]["deletionGracePeriodSeconds"] = 300
    w.reconcile()
    w.now = 41
    w.set_phase("g-worker-0", "Failed", 1)
    w.reconcile()
    assert failed(w)


def test_a_peer_deleted_by_someone_else_makes_the_survivors_end_collateral() -> None:
    w = running_world(gang_job())
    w.now = 20
    w.pods["g-worker-1"]["metadata"]["deletionTimestamp"] = ts(50)
    w.pods["g-worker-1"]["metadata"]["deletionGracePeriodSeconds"] = 30
    w.now = 22
    w.set_phase("g-worker-0", "Failed", 1)
    p = w.reconcile()
    assert not failed(w) and p.requeue_after is None  # collateral: nothing to wait for
    w.now = 26
    w.set_phase("g-worker-1", "Failed", 143)
    w.reconcile()
    assert not failed(w)
    assert w.status["gangEpoch"] == 1
    assert rs(w, "Worker").get("disruptions", 0) == 1


@pytest.mark.parametrize("same_pass", [True, False])
def test_without_whole_gang_restart_the_failure_says_it_followed_a_peer(same_pass: bool) -> None:
    w = running_world(plain_job())
    w.now = 20
    w.set_phase("g-worker-1", "Failed", 137)
    if not same_pass:
        w.now = 21
        w.reconcile()  # the kill accounted: a restart, the pod goes
        w.now = 22
        w.reconcile()
        w.gone()
    w.now = 23
    w.set_phase("g-worker-0", "Failed", 1)
    w.now = 24
    w.reconcile()
    assert failed(w)
    warned = [e for e in w.events if e.reason == "FailedAfterPeerEnd"]
    assert len(warned) == 1
    assert warned[0].type == "Warning"
    message = warned[0].message
    assert "pod g-worker-0 failed 3s after its peer g-worker-1" in message
    assert 'training.kubeflow.org/gang-restart: "true"' in message
    w.now = 30
    w.settle()
    assert len([e for e in w.events if e.reason == "FailedAfterPeerEnd"]) == 1


def test_without_whole_gang_restart_a_failure_of_its_own_says_nothing_more() -> None:
    w = running_world(plain_job())
    w.now = 20
    w.set_phase("g-worker-1", "Failed", 137)
    w.now = 41  # beyond the window
    w.set_phase("g-worker-0", "Failed", 1)
    w.reconcile()
    assert failed(w)
    assert "FailedAfterPeerEnd" not in w.reasons()


def test_the_window_is_the_configured_one() -> None:
    w = running_world(gang_job())
    w.now = 20
    w.set_phase("g-worker-0", "Failed", 1)
    p = w.reconcile(replace(CFG, collateral_window_seconds=5))
    assert p.requeue_after == pytest.approx(5)
    w.now = 25
    w.reconcile(replace(CFG, collateral_window_seconds=5))
    assert failed(w)


def _pod(index: int, finished: float, code: int) -> ObservedPod:
    return make_pod(gang_job(), "Worker", index).failed(code, finished=finished).view()


def test_window_bounds_and_ties() -> None:
    peer = Trouble("g-worker-1", at(20))
    for end, caused in [(20, True), (40, True), (41, False), (19, False)]:
        ends = Ends((_pod(0, end, 1),), (peer,), live=1)
        out = collateral(ends, at(end), WINDOW, whole_gang=True)
        assert bool(out.followed) is caused, end
        assert (out.followed[0].seconds if caused else None) == (end - 20 if caused else None)
        # an end with a trouble in sight that did not cause it is not held
        assert bool(out.deferred) is caused, end
    alone = Ends((_pod(0, 20, 1),), (), live=0)
    assert collateral(alone, at(21), WINDOW, whole_gang=True).deferred == frozenset()


def test_without_whole_gang_restart_a_deleted_peer_gone_before_is_still_named() -> None:
    """A preemption: the deleted peer ends, is accounted and gone before its survivor
    fails; its index's record keeps when its end began."""
    w = running_world(plain_job())
    w.now = 20
    w.pods["g-worker-1"]["metadata"]["deletionTimestamp"] = ts(50)
    w.pods["g-worker-1"]["metadata"]["deletionGracePeriodSeconds"] = 30
    w.now = 21
    w.set_phase("g-worker-1", "Failed", 143)
    w.reconcile()
    assert rs(w, "Worker")["disruptions"] == 1
    assert rs(w, "Worker")["indexRetries"]["1"]["lastEndTime"] == ts(20)
    w.reconcile()
    w.gone("g-worker-1")
    w.now = 25
    w.set_phase("g-worker-0", "Failed", 1)
    w.reconcile()
    assert failed(w)
    warned = [e for e in w.events if e.reason == "FailedAfterPeerEnd"]
    assert len(warned) == 1 and "failed 5s after its peer g-worker-1" in warned[0].message
