"""The reconciler's memory of a job is dropped whole, in one place."""

from __future__ import annotations

from controller.clock import FakeClock
from controller.runtime.pacer import Pacer
from reconcile.api.spec import SpecCache
from reconcile.policy.failures import CreateFailures
from reconcile.sync.memory import JobMemory
from tests.builders import make_tfjob


def test_forget_drops_everything_remembered_of_the_job_and_nothing_of_others() -> None:
    clock = FakeClock()
    memory = JobMemory(
        specs=SpecCache(),
        failures=CreateFailures(clock, grace_seconds=0, min_attempts=1),
        pacer=Pacer(clock, 1.0),
    )
    for key in ("ns/a", "ns/b"):
        job = make_tfjob(key.split("/")[1]).worker(1).obj()
        memory.specs.read(key, job)
        memory.failures.failed(key, "uid", "Pod", "p", "refused")
        memory.pacer.mark(key)
        memory.record(key).status_in_flight = True
    assert memory.peek("ns/c") is None and len(memory) == 2  # reading makes no record
    memory.forget("ns/a")
    assert memory.peek("ns/a") is None
    assert len(memory.specs) == 1 and len(memory.pacer) == 1
    assert memory.failures.persistent("ns/a", "uid") is None
    assert memory.failures.persistent("ns/b", "uid") is not None
    assert memory.peek("ns/b") == memory.record("ns/b") and len(memory) == 1
