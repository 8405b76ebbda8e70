"""Pipelined writes against the real kube-apiserver: events sent together on one
connection (KubeApi.pipeline, EventRecorder's batches) all land, in order, each with its
own answer; a refused one fails alone."""

from __future__ import annotations

import asyncio
import uuid

from controller import errors
from controller.client.api import ClientSettings, KubeApi
from controller.client.kube import EVENTS, ResourceClient
from controller.runtime.events import EventRecorder
from tests.cluster.kube import Kube
from tests.conftest import Cluster


def event(namespace: str, message: str, name: str | None = None) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name or f"pipelined.{uuid.uuid4().hex[:12]}", "namespace": namespace},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": namespace},
        "type": "Normal",
        "reason": "Pipelined",
        "message": message,
    }


async def test_pipelined_creates_land_in_order_with_their_own_answers(
    cluster: Cluster, kube: Kube, namespace: str
) -> None:
    async with await KubeApi.from_kubeconfig(cluster.kubeconfig) as api:
        events = ResourceClient(api, EVENTS)
        taken = event(namespace, "first of its name", name="pipelined.taken")
        await events.create(namespace, taken)
        items = [(namespace, event(namespace, f"n{i}")) for i in range(25)]
        items.insert(10, (namespace, event(namespace, "again", name="pipelined.taken")))
        pool = api._get_pool(stream=False)
        answers = await events.create_many(items)
        assert len(pool._open) == 1, "all of them on one connection"
    assert isinstance(answers[10], errors.AlreadyExists), answers[10]
    created = [a for i, a in enumerate(answers) if i != 10]
    assert all(isinstance(a, dict) for a in created), created
    assert [a["message"] for a in created] == [f"n{i}" for i in range(25)]  # type: ignore[index]
    stored = {e["metadata"]["name"]: e["message"] for e in kube.events(namespace)}
    assert stored["pipelined.taken"] == "first of its name"
    assert sorted(m for m in stored.values() if m != "first of its name") == sorted(
        f"n{i}" for i in range(25)
    )


async def test_the_recorder_writes_its_events_in_batches_under_a_rate_limit(
    cluster: Cluster, kube: Kube, namespace: str
) -> None:
    settings = ClientSettings(qps=20, burst=30, tick=0.05)
    async with await KubeApi.from_kubeconfig(cluster.kubeconfig, settings=settings) as api:
        recorder = EventRecorder(ResourceClient(api, EVENTS), "tfjob-controller", host="t")
        job = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "TFJob",
            "metadata": {"name": "j", "namespace": namespace, "uid": str(uuid.uuid4())},
        }
        for i in range(45):
            recorder.event(job, "Normal", "SuccessfulCreatePod", f"Created pod: j-worker-{i}")
        await recorder.flush()
        recorder.event(job, "Normal", "SuccessfulCreatePod", "Created pod: j-worker-0")
        await recorder.flush()
        assert (recorder.written, recorder.dropped) == (46, 0)
    stored = [e for e in kube.events(namespace) if e["involvedObject"]["name"] == "j"]
    assert sorted(e["message"] for e in stored) == sorted(
        f"Created pod: j-worker-{i}" for i in range(45)
    )
    counts = {e["message"]: e["count"] for e in stored}
    assert counts["Created pod: j-worker-0"] == 2, "a repeat patches the count"


async def test_creates_one_tick_releases_go_out_together_and_each_gets_its_answer(
    cluster: Cluster, kube: Kube, namespace: str
) -> None:
    # KubeApi.request's coalescing: the creates a tick of the rate limit lets out
    # together share one write on one connection
    settings = ClientSettings(qps=20, burst=8, tick=0.1)
    async with await KubeApi.from_kubeconfig(cluster.kubeconfig, settings=settings) as api:
        events = ResourceClient(api, EVENTS)
        await events.create(namespace, event(namespace, "first of its name", "coalesced.taken"))
        bodies = [event(namespace, f"c{i}") for i in range(7)]
        bodies.insert(3, event(namespace, "again", name="coalesced.taken"))
        pool = api._get_pool(stream=False)
        answers = await asyncio.gather(
            *(events.create(namespace, b) for b in bodies), return_exceptions=True
        )
        assert len(pool._open) == 1, "all eight on one connection"
    assert isinstance(answers[3], errors.AlreadyExists), answers[3]
    created = [a for i, a in enumerate(answers) if i != 3]
    assert [a["message"] for a in created] == [f"c{i}" for i in range(7)]  # type: ignore[index]
    stored = {e["metadata"]["name"]: e["message"] for e in kube.events(namespace)}
    assert stored["coalesced.taken"] == "first of its name"
    assert sorted(m for m in stored.values() if m.startswith("c")) == [f"c{i}" for i in range(7)]
