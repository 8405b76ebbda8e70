from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller import errors
from controller.clock import FakeClock
from controller.runtime.events import EventRecorder
from controller.types import JSON

JOB = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "TFJob",
    "metadata": {"name": "job", "namespace": "ns", "uid": "u-1", "resourceVersion": "7"},
}


class FakeEvents:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, JSON]] = []
        self.fail_patch: BaseException | None = None
        self.fail_create: BaseException | None = None
        self.batches: list[int] = []

    async def create(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        if self.fail_create:
            raise self.fail_create
        self.calls.append(("create", namespace, dict(body)))
        return dict(body)

    async def create_many(self, items: list[tuple[str, Mapping[str, Any]]]) -> list[Any]:
        self.batches.append(len(items))
        out: list[Any] = []
        for namespace, body in items:
            try:
                out.append(await self.create(namespace, body))
            except Exception as e:
                out.append(e)
        return out

    async def patch(self, namespace: str, name: str, body: Mapping[str, Any], **_: Any) -> JSON:
        if self.fail_patch:
            raise self.fail_patch
        self.calls.append(("patch", name, dict(body)))
        return {}


def recorder(writer: FakeEvents, **kw: Any) -> EventRecorder:
    return EventRecorder(writer, "tfjob-controller", clock=FakeClock(), host="h", **kw)


async def test_repeats_fold_into_count() -> None:
    w = FakeEvents()
    rec = recorder(w)
    for _ in range(3):
        rec.event(JOB, "Normal", "Created", "created pod")
    assert rec.backlog == 1, "repeats while buffered only bump a count"
    await rec.flush()
    ((kind, ns, body),) = w.calls
    assert (kind, ns, body["count"]) == ("create", "ns", 3)
    assert body["involvedObject"]["uid"] == "u-1"
    assert body["source"] == {"component": "tfjob-controller", "host": "h"}
    assert body["metadata"]["name"].startswith("job.")

    rec.event(JOB, "Normal", "Created", "created pod")
    await rec.flush()
    assert w.calls[1] == (
        "patch",
        body["metadata"]["name"],
        {"count": 4, "lastTimestamp": "2024-01-01T00:00:00Z"},
    )

    rec.event(JOB, "Normal", "Created", "another message")
    await rec.flush()
    assert w.calls[2][0] == "create"


async def test_expired_event_is_recreated() -> None:
    w = FakeEvents()
    rec = recorder(w)
    rec.event(JOB, "Warning", "Failed", "x")
    await rec.flush()
    w.fail_patch = errors.NotFound(404, "NotFound", "gone")
    rec.event(JOB, "Warning", "Failed", "x")
    await rec.flush()
    assert [c[0] for c in w.calls] == ["create", "create"]


async def test_buffer_is_bounded_and_failures_never_raise() -> None:
    w = FakeEvents()
    why: list[str] = []
    rec = recorder(w, buffer_size=2, on_drop=why.append)
    rec.event(JOB, "Normal", "A", "1")
    rec.event(JOB, "Normal", "B", "2")
    rec.event(JOB, "Normal", "C", "3")
    assert rec.dropped == 1
    rec.event({"metadata": None}, "Normal", "A", "1")  # malformed object: no exception
    assert rec.dropped == 2  # ...but the buffer is still full
    w.fail_create = errors.ServerError(500, "", "down")
    await rec.flush()
    assert rec.dropped == 4, "failed writes are dropped, not retried"
    assert why == ["buffer_full", "buffer_full", "write_failed", "write_failed"]
    assert w.calls == []
    assert rec.backlog == 0


async def test_a_full_buffer_gives_routine_events_up_first() -> None:
    w = FakeEvents()
    why: list[str] = []
    rec = recorder(w, buffer_size=3, on_drop=why.append, routine=frozenset({"Made"}))
    rec.event(JOB, "Normal", "Made", "pod 1")
    rec.event(JOB, "Normal", "Started", "the job runs")
    rec.event(JOB, "Normal", "Made", "pod 2")
    rec.event(JOB, "Normal", "Made", "pod 3")  # routine: no place for it
    rec.event(JOB, "Warning", "Made", "a Warning is never routine")  # takes pod 1's place
    rec.event(JOB, "Normal", "Succeeded", "the job ended")  # takes pod 2's place
    rec.event(JOB, "Normal", "Failed", "no routine event left to give way")
    assert rec.dropped == 4
    assert why == 4 * ["buffer_full"]
    await rec.flush()
    assert [(c[2]["type"], c[2]["message"]) for c in w.calls] == [
        ("Normal", "the job runs"),
        ("Warning", "a Warning is never routine"),
        ("Normal", "the job ended"),
    ]
    # once written, a routine event is no longer there to be given up
    rec.event(JOB, "Normal", "Made", "pod 4")
    await rec.flush()
    for i in range(3):
        rec.event(JOB, "Normal", "Step", f"{i}")
    rec.event(JOB, "Normal", "Late", "dropped: nothing routine is pending")
    assert rec.dropped == 5 and rec.backlog == 3


async def test_every_event_recorded_is_told_repeats_and_drops_included() -> None:
    told: list[tuple[str, str]] = []
    rec = recorder(FakeEvents(), buffer_size=1, on_event=lambda t, r: told.append((t, r)))
    rec.event(JOB, "Warning", "FailedCreatePod", "x")
    rec.event(JOB, "Warning", "FailedCreatePod", "x")  # folded into one Event's count
    rec.event(JOB, "Normal", "Other", "y")  # dropped: the buffer holds one
    assert told == [
        ("Warning", "FailedCreatePod"),
        ("Warning", "FailedCreatePod"),
        ("Normal", "Other"),
    ]
    assert rec.dropped == 1


async def test_a_terminating_namespace_is_muted_for_a_while() -> None:
    w = FakeEvents()
    clock = FakeClock()
    rec = EventRecorder(w, "tfjob-controller", clock=clock, host="h", mute_seconds=300)
    w.fail_create = errors.Forbidden(
        403, "Forbidden", "namespace is being terminated",
        {"causes": [{"reason": "NamespaceTerminating"}]},
    )  # fmt: skip
    rec.event(JOB, "Normal", "A", "1")
    await rec.flush()
    w.fail_create = None
    other = {**JOB, "metadata": {**JOB["metadata"], "namespace": "other", "uid": "u-2"}}
    for reason in ("B", "C"):
        rec.event(JOB, "Normal", reason, "1")
    rec.event(other, "Normal", "B", "1")
    await rec.flush()
    # nothing more is sent to the namespace going away; other namespaces are unaffected
    assert [(c[1], c[2]["reason"]) for c in w.calls] == [("other", "B")]
    assert rec.dropped == 3
    clock.advance(301)
    rec.event(JOB, "Normal", "D", "1")
    await rec.flush()
    assert w.calls[-1][1:] and w.calls[-1][2]["reason"] == "D"


async def test_new_events_go_out_together_and_a_failed_one_is_dropped_alone() -> None:
    w = FakeEvents()
    dropped: list[str] = []
    rec = recorder(w, batch_size=3, on_drop=dropped.append)
    for i in range(5):
        rec.event(JOB, "Normal", "Created", f"pod {i}")
    await rec.flush()
    assert w.batches == [3, 2], "five new events in batches of three"
    assert [c[2]["message"] for c in w.calls] == [f"pod {i}" for i in range(5)]

    # a repeat of a written event is a patch, never part of a batch
    rec.event(JOB, "Normal", "Created", "pod 0")
    await rec.flush()
    assert w.calls[-1][0] == "patch" and w.batches == [3, 2]

    class Refused(FakeEvents):
        async def create(self, namespace: str, body: Mapping[str, Any]) -> JSON:
            if body["message"] == "bad":
                raise errors.Invalid(422, "Invalid", "no")
            return await super().create(namespace, body)

    w2 = Refused()
    rec2 = recorder(w2, on_drop=dropped.append)
    for m in ("ok 1", "bad", "ok 2"):
        rec2.event(JOB, "Normal", "Created", m)
    await rec2.flush()
    assert [c[2]["message"] for c in w2.calls] == ["ok 1", "ok 2"]
    assert rec2.written == 2 and rec2.dropped == 1 and dropped == ["write_failed"]
    rec2.event(JOB, "Normal", "Created", "ok 2")
    await rec2.flush()
    assert w2.calls[-1][0] == "patch", "the written ones of a batch are remembered"


async def test_a_batch_that_raises_drops_its_events_and_the_writer_goes_on() -> None:
    class Broken(FakeEvents):
        async def create_many(self, items: list[tuple[str, Mapping[str, Any]]]) -> list[Any]:
            raise RuntimeError("boom")

    w = Broken()
    rec = recorder(w)
    rec.event(JOB, "Normal", "Created", "a")
    rec.event(JOB, "Normal", "Created", "b")
    await rec.flush()
    assert (rec.dropped, rec.written, rec.backlog) == (2, 0, 0)
