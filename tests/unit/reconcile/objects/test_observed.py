"""reconcile.objects.observed: what a pass reads of each pod, read once."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from reconcile.api.names import GANG_EPOCH_LABEL, RETIRED_ANNOTATION
from reconcile.objects.observed import ObservedPod, group_pods, observe, observe_all, raws
from reconcile.objects.pods import NO_EXIT_CODE
from tests.builders import PodBuilder, at, make_pod, make_tfjob

JOB = make_tfjob("j", uid="job-uid").worker(3).obj()


def pod(index: int = 0) -> PodBuilder:
    return make_pod(JOB, "Worker", index)


def retired(p: PodBuilder) -> dict[str, Any]:
    raw = p.obj()
    raw["metadata"]["annotations"] = {RETIRED_ANNOTATION: "true"}
    return raw


def epoch(p: PodBuilder, value: str) -> dict[str, Any]:
    raw = p.obj()
    raw["metadata"]["labels"][GANG_EPOCH_LABEL] = value
    return raw


def no_status(p: PodBuilder) -> dict[str, Any]:
    raw = p.obj()
    del raw["status"]
    return raw


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        pytest.param(pod().pending().obj(), {"phase": "Pending", "scheduled": True,
                     "exit_code": NO_EXIT_CODE, "started": None, "finished": None},
                     id="pending"),
        pytest.param(no_status(pod()), {"phase": "Pending", "restarts": 0}, id="no-status"),
        pytest.param(pod().pending().unscheduled().obj(), {"scheduled": False}, id="unscheduled"),
        pytest.param(pod().running(started=3).obj(), {"phase": "Running", "started": at(3)},
                     id="running"),
        pytest.param(pod().failed(137, finished=40, started=5).obj(),
                     {"phase": "Failed", "exit_code": 137, "started": at(5), "finished": at(40)},
                     id="failed"),
        pytest.param(pod().running().restarts(3).obj(), {"restarts": 3}, id="restarted-in-place"),
        pytest.param(pod().failed(1).evicted().obj(), {"disruption_marked": True}, id="evicted"),
        pytest.param(pod().running().disruption_target().obj(), {"disruption_marked": True},
                     id="disruption-target"),
        pytest.param(pod().running().obj(), {"disruption_marked": False, "terminating": False,
                     "deletion_requested": None, "grace_zero": False}, id="not-disrupted"),
        pytest.param(pod().running().terminating(requested=50, grace=30).obj(),
                     {"terminating": True, "deletion_requested": at(50), "grace_zero": False},
                     id="terminating"),
        pytest.param(pod().running().terminating(requested=50, grace=0).obj(),
                     {"grace_zero": True, "deletion_requested": at(50)}, id="force-deleted"),
        pytest.param(pod().tracked().created(7).obj(), {"tracked": True, "created": at(7)},
                     id="tracked"),
        pytest.param(pod().obj(), {"tracked": False, "retired": False, "epoch": 0},
                     id="untracked"),
        pytest.param(retired(pod()), {"retired": True}, id="retired"),
        pytest.param(epoch(pod(), "4"), {"epoch": 4}, id="gang-epoch"),
        pytest.param(epoch(pod(), "four"), {"epoch": -1}, id="gang-epoch-unreadable"),
        pytest.param(pod(2).uid("u-2").obj(),
                     {"name": "j-worker-2", "uid": "u-2", "rtype": "worker", "index": 2},
                     id="identity"),
    ],
)  # fmt: skip
def test_observe(raw: dict[str, Any], want: dict[str, Any]) -> None:
    before = copy.deepcopy(raw)
    view = observe(raw)
    assert {k: getattr(view, k) for k in want} == want
    assert view.raw is raw and raw == before  # held as it is, never changed


def test_a_pod_without_labels() -> None:
    view = observe({"metadata": {"name": "x", "labels": {}}})
    assert (view.rtype, view.index, view.uid) == (None, None, "")


def test_views_compare_by_what_is_read_not_by_the_object() -> None:
    a, b = pod().running().obj(), pod().running().obj()
    assert a is not b and observe(a) == observe(b)
    assert observe(a) != observe(pod().failed(1).obj())


def test_group_pods_skips_unlabelled_and_raws_gives_the_objects() -> None:
    a, b = pod(0).view(), pod(1).view()
    stray = observe({"metadata": {"name": "x", "labels": {}}})
    assert group_pods([a, b, stray]) == {"worker": {0: [a], 1: [b]}}
    objs = [pod(0).obj(), pod(1).obj()]
    assert all(r is o for r, o in zip(raws(observe_all(objs)), objs, strict=True))


def test_a_view_is_frozen() -> None:
    view: Any = pod().view()
    with pytest.raises(AttributeError):
        view.phase = "Succeeded"
    assert isinstance(view, ObservedPod)


def test_a_known_view_is_kept_for_the_same_object_only() -> None:
    """A pass hands back the views of the job's last one: a pod that is still the very
    object its view was read from keeps it; a new version of the pod (a new object,
    as the cache makes for every change), or a known view of another object under the
    same UID, is read afresh."""
    same, changed = pod(0).running().obj(), pod(1).running().obj()
    known = {v.uid: v for v in observe_all([same, changed, pod(2).obj()])}
    newer = {**changed, "status": {**changed["status"], "phase": "Succeeded"}}
    lookalike = copy.deepcopy(same)
    views = observe_all([same, newer], known)
    assert views[0] is known[same["metadata"]["uid"]]
    assert views[1] is not known[changed["metadata"]["uid"]]
    assert views[1].raw is newer and views[1].phase == "Succeeded"
    again = observe_all([lookalike], known)[0]
    assert again is not known[same["metadata"]["uid"]] and again.raw is lookalike
    assert again == known[same["metadata"]["uid"]]  # the same reading, freshly made
