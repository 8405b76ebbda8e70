"""The chaos suite's audit-log checks on made-up events: a write is fenced by the last
Lease write before it (holder and lease duration), and a 409 create is a violation.
Also which pods the kubelet stand-in nudges."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.chaos.audit import AuditChecks
from tests.chaos.violations import Violations

NS, NAME = "default", "lease"


def at(t: float) -> str:
    return f"2026-01-01T00:{int(t) // 60:02d}:{t % 60:09.6f}Z"


def lease(t: float, holder: str) -> dict[str, Any]:
    return {
        "stage": "ResponseComplete",
        "verb": "update",
        "userAgent": f"tfjob-controller-leader-election/{holder}",
        "objectRef": {"resource": "leases", "namespace": NS, "name": NAME},
        "requestObject": {"spec": {"holderIdentity": holder}},
        "responseStatus": {"code": 200},
        "requestReceivedTimestamp": at(t),
        "stageTimestamp": at(t),
    }


def write(t: float, who: str, verb: str = "create", code: int = 201) -> dict[str, Any]:
    return {
        "stage": "ResponseComplete",
        "verb": verb,
        "userAgent": f"tfjob-controller/{who} (linux)",
        "objectRef": {"resource": "pods", "namespace": "chaos", "name": f"p{t}"},
        "responseStatus": {"code": code},
        "requestReceivedTimestamp": at(t),
        "stageTimestamp": at(t),
    }


def check(events: list[dict[str, Any]]) -> Violations:
    v = Violations()
    AuditChecks(NS, NAME, v).finish(events)
    return v


def test_writes_while_holding_the_lease_are_fine() -> None:
    v = check([lease(1, "a"), write(2, "a"), lease(10, "a"), write(20, "a")])
    assert v.items == []


def test_a_write_after_another_replica_acquired_is_a_violation() -> None:
    v = check([lease(1, "a"), lease(17, "b"), write(17.5, "a"), write(18, "b")])
    assert v.by_kind == {"fencing": 1}
    assert "by a" in v.items[0]["what"] and "held by b" in v.items[0]["what"]


def test_a_write_past_the_lease_duration_is_a_violation() -> None:
    v = check([lease(1, "a"), write(16.5, "a")])
    assert v.by_kind == {"fencing": 1}


def test_a_409_create_is_a_violation() -> None:
    v = check([lease(1, "a"), write(2, "a", code=409)])
    assert v.by_kind == {"duplicate-create": 1}


def test_failover_times_come_from_the_successor_lease_and_first_write() -> None:
    v = Violations()
    a = AuditChecks(NS, NAME, v)
    a.finish([lease(1, "a"), lease(17, "b"), write(18, "b")])
    died = a.leases[0].t + 1  # the wall clock time of the leader's death
    assert a.successor("a", died) == ("b", 15.0, 16.0)
    assert a.transitions() == 1


def test_the_kubelet_stand_in_nudges_only_pods_kwok_gave_up_on() -> None:
    from tests.chaos.driver import NUDGE_AFTER, _stuck

    now = 1_000_000.0

    def ts(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def pod(phase: str, *, bound: bool = True, **meta: Any) -> dict[str, Any]:
        return {
            "metadata": {"creationTimestamp": ts(now - 100), **meta},
            "spec": {"nodeName": "kwok-node-0"} if bound else {},
            "status": {"phase": phase},
        }

    assert _stuck(pod("Pending"), now) == "bound and Pending"
    assert _stuck(pod("Pending", bound=False), now) is None  # the scheduler's
    assert _stuck(pod("Running"), now) is None
    young = pod("Pending", creationTimestamp=ts(now - NUDGE_AFTER / 2))
    assert _stuck(young, now) is None
    # deleted (grace 30) 40 s ago and never killed: kwok's kill got a 500
    killed_late = {"deletionTimestamp": ts(now - 10), "deletionGracePeriodSeconds": 30}
    assert _stuck(pod("Running", **killed_late), now) == "deleted and still Running"
    just_deleted = {"deletionTimestamp": ts(now + 25), "deletionGracePeriodSeconds": 30}
    assert _stuck(pod("Running", **just_deleted), now) is None
    held = {**killed_late, "annotations": {"kwok.test/hold-on-delete": "true"}}
    assert _stuck(pod("Running", **held), now) is None


def test_the_kubelet_stand_in_never_does_the_controllers_work() -> None:
    """A deleted pod kwok gave up on is nudged; one that has ended and is held only by
    a finalizer (the controller's to release) never is."""
    from tests.chaos.driver import NUDGE_AFTER, _stuck

    def deleted(phase: str, finalizers: list[str]) -> dict[str, Any]:
        return {
            "metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z", "finalizers": finalizers,
                         "deletionGracePeriodSeconds": 0},
            "status": {"phase": phase},
        }  # fmt: skip

    later = datetime(2024, 1, 1, tzinfo=UTC).timestamp() + NUDGE_AFTER + 1
    ours = ["training.kubeflow.org/tfjob-tracking"]
    assert _stuck(deleted("Failed", ours), later) is None
    assert _stuck(deleted("Succeeded", ours), later) is None
    assert _stuck(deleted("Failed", []), later) == "deleted and still Failed"
    assert _stuck(deleted("Running", ours), later) == "deleted and still Running"
    assert _stuck(deleted("Running", ours), later - 2) is None, "not for long yet"
