"""The controller's event recorder as the app builds it: a burst of per-child events
that fills its buffer gives way to a Warning, and the drop is counted in the metrics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.clock import FakeClock
from controller.observability.metrics import Metrics
from controller.types import JSON
from tfjob_controller.app import event_recorder

JOB = {"kind": "TFJob", "metadata": {"name": "t", "namespace": "ns", "uid": "u"}}


class Written:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    async def create(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        self.reasons.append(body["reason"])
        return dict(body)

    async def create_many(self, items: list[tuple[str, Mapping[str, Any]]]) -> list[Any]:
        return [await self.create(namespace, body) for namespace, body in items]

    async def patch(self, namespace: str, name: str, body: Mapping[str, Any], **_: Any) -> JSON:
        raise AssertionError("every event here is new")


async def test_a_full_buffer_of_creates_gives_way_to_a_warning() -> None:
    metrics = Metrics()
    written = Written()
    rec = event_recorder(written, FakeClock(), metrics)
    n = 0
    while rec.dropped == 0:  # as many created pods as the buffer holds, and one more
        rec.event(JOB, "Normal", "SuccessfulCreatePod", f"Created pod: t-worker-{n}")
        n += 1
    full = rec.backlog
    rec.event(JOB, "Warning", "FailedCreatePod", "Error creating: quota exceeded")
    assert rec.backlog == full and rec.dropped == 2, "the Warning took a create's place"
    assert 'events_dropped_total{reason="buffer_full"} 2' in metrics.registry.expose().decode()
    await rec.flush()
    assert written.reasons.count("FailedCreatePod") == 1
    assert len(written.reasons) == full


def test_only_the_writes_whose_answers_are_read_decode_them() -> None:
    """Children's creates and events are only checked for success; a status write's
    answer and a release's (its resourceVersion says whether an event will come) are
    read, and so is everything the informers list and watch."""
    from controller.client.api import ClientSettings, KubeApi
    from controller.client.auth.kubeconfig import new_configuration
    from tfjob_controller.app import Budgets

    cfg = new_configuration()
    cfg.host = "http://127.0.0.1:1"
    budgets = Budgets(KubeApi(cfg, ClientSettings(qps=20, burst=30, tick=0.1)))
    writers = budgets.writers(None)
    assert (writers.pods.answers, writers.services.answers) == (False, False)
    assert (writers.jobs.answers, writers.releases.answers) == (True, True)
    assert budgets.event_writer().answers is False
