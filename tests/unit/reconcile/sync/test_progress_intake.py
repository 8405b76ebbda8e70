"""The intake: a report taken only from a pod of the job, kept per replica, and the job
scheduled no sooner than its pace."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller.cache.store import Store, index_by_pod_ip
from controller.clock import FakeClock
from controller.runtime.pacer import Pacer, SlotGate
from controller.types import JSON, POD_IP_INDEX, Caller
from reconcile.objects.reporting import progress_path
from reconcile.sync.progress import GATHER_SECONDS, ProgressIntake
from tests.builders import at, make_pod, make_tfjob
from tfjob_controller.app import CHILD_INDEXERS, POD_TRANSFORM

JOB = make_tfjob("mnist", "ns", uid="job-uid").worker(2).obj()
POD = make_pod(JOB, "Worker", 1).uid("pod-1").running().obj()


class Cache:
    def __init__(self, *objs: JSON) -> None:
        self.objs = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objs}

    def get(self, namespace: str, name: str) -> JSON | None:
        return self.objs.get((namespace, name))

    def by_index(self, index: str, value: str) -> list[JSON]:
        return []


class Queue:
    def __init__(self) -> None:
        self.added: list[tuple[str, float]] = []

    def add(self, key: str) -> None:
        self.added.append((key, 0.0))

    def add_low(self, key: str) -> None:
        self.added.append((key, 0.0))

    def add_after(self, key: str, delay: float) -> None:
        self.added.append((key, delay))


def caller(pod: str = POD["metadata"]["name"], uid: str = "pod-1", ns: str = "ns") -> Caller:
    extra = {
        "authentication.kubernetes.io/pod-name": (pod,),
        "authentication.kubernetes.io/pod-uid": (uid,),
    }
    return Caller(f"system:serviceaccount:{ns}:default", extra=extra)


def intake(**kw: Any) -> tuple[ProgressIntake, Queue, Pacer[str]]:
    clock = FakeClock()
    queue, pacer = Queue(), Pacer[str](clock, 5.0)
    got = ProgressIntake(
        jobs=Cache(JOB), pods=Cache(POD), queue=queue, pacer=pacer, now=clock.now, **kw
    )
    return got, queue, pacer


PATH = progress_path("ns", "mnist")


def test_paths_and_audiences() -> None:
    i, _, _ = intake()
    assert i.audience(PATH) == "tfjob.kubeflow.org/ns/mnist"
    for bad in ("/v1/namespaces/ns/tfjobs/mnist", "/v1/namespaces/NS/tfjobs/x/progress", "/", ""):
        assert i.audience(bad) is None


def test_a_pods_report_is_its_replicas_and_schedules_the_job() -> None:
    i, queue, pacer = intake()
    assert i.accept(PATH, caller(), b'{"step": 3}').status == 204
    (rec,) = i.records("ns/mnist")
    assert (rec.who.replica_type, rec.who.index, rec.report.step) == ("Worker", 1, 3)
    assert queue.added == [("ns/mnist", GATHER_SECONDS)]
    pacer.mark("ns/mnist")  # a status write just now: the next pass waits for the pace
    i.accept(PATH, caller(), b'{"step": 4}')
    assert queue.added[-1] == ("ns/mnist", 5.0)
    assert len(i) == 1  # one record per replica, the latest
    i.forget("ns/mnist")
    assert i.records("ns/mnist") == ()


def test_refusals() -> None:
    i, queue, _ = intake()
    assert i.accept(progress_path("ns", "other"), caller(), b'{"step": 1}').status == 404
    assert i.accept(PATH, caller(uid="old"), b'{"step": 1}').status == 403
    assert i.accept(PATH, caller(ns="evil"), b'{"step": 1}').status == 403
    assert i.accept(PATH, caller(pod="someone-else"), b'{"step": 1}').status == 403
    bad = i.accept(PATH, caller(), b'{"step": -1}')
    assert (bad.status, bad.field_name) == (400, "step")
    assert queue.added == [] and len(i) == 0


def test_a_job_waiting_for_its_slot_is_not_looked_at_before_it() -> None:
    clock = FakeClock()
    queue, pacer = Queue(), Pacer[str](clock, 5.0)
    gate = SlotGate[str](clock, rate=0.1)
    i = ProgressIntake(
        jobs=Cache(JOB), pods=Cache(POD), queue=queue, pacer=pacer, now=clock.now, gate=gate
    )
    gate.reserve("other/job")
    gate.reserve("ns/mnist")  # the pass found the gate busy: its slot is in 10 s
    i.accept(PATH, caller(), b'{"step": 3}')
    assert queue.added == [("ns/mnist", pytest.approx(10.0))]


def test_the_precheck_refuses_unreviewed_what_no_review_could_make_good() -> None:
    i, queue, _ = intake()
    name = POD["metadata"]["name"]
    now = i._now().timestamp()
    assert i.precheck(PATH, name, "pod-1", now) is None
    # another UID under the name: the pod is gone
    got = i.precheck(PATH, name, "old-uid", now)
    assert got is not None and got.status == 403 and "is gone" in got.message
    # a name of no cached pod, in a token just issued: maybe ahead of the cache
    for issued in (now, now - 4, None):
        got = i.precheck(PATH, "mnist-worker-0", "x", issued)
        assert got is not None and (got.status, got.retry_after) == (503, 1.0)
    # issued a while ago: the cache would hold its pod by now; it is gone
    got = i.precheck(PATH, "mnist-worker-0", "x", now - 6)
    assert got is not None and got.status == 403 and "or is gone" in got.message
    got = i.precheck(progress_path("ns", "other"), name, "pod-1", now)
    assert got is not None and got.status == 404
    assert queue.added == []  # nothing of it schedules a pass


def test_the_servers_deaf_windows_are_kept_for_the_stall_deadline() -> None:
    i, _, _ = intake()
    assert i.unheard_at is None
    i.unheard(at(50), "every connection slot is taken")
    i.unheard(at(60), "accept failed: " + "x" * 1_000)
    assert i.unheard_at is not None
    when, why = i.unheard_at
    assert when == at(60) and why.startswith("accept failed: ") and len(why) == 200


def test_the_addresses_of_our_pods_are_known_as_the_pod_cache_indexes_them() -> None:
    """Through the controller's own pod transform and index: a pod's status.podIP and
    podIPs are known, as they change; no other address is."""
    store = Store({**CHILD_INDEXERS, POD_IP_INDEX: index_by_pod_ip})
    pod = copy.deepcopy(POD)
    pod["status"]["podIP"] = "10.1.2.3"
    pod["status"]["podIPs"] = [{"ip": "10.1.2.3"}, {"ip": "fd00::3"}]
    store.upsert(POD_TRANSFORM(pod))
    i = ProgressIntake(
        jobs=Cache(JOB), pods=store, queue=Queue(), pacer=Pacer[str](FakeClock(), 5.0),
        now=FakeClock().now,
    )  # fmt: skip
    assert i.known_source("10.1.2.3") and i.known_source("fd00::3")
    assert not i.known_source("10.1.2.4") and not i.known_source("")
    moved = copy.deepcopy(pod)
    moved["status"]["podIP"] = "10.9.9.9"
    moved["status"]["podIPs"] = [{"ip": "10.9.9.9"}]
    moved["metadata"]["resourceVersion"] = "2"
    store.upsert(POD_TRANSFORM(moved))
    assert i.known_source("10.9.9.9") and not i.known_source("10.1.2.3")
