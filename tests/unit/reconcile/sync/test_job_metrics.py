"""Job counters: every one of a namespace exists at 0 from its first job, so an alert's
increase() sees the first failure, stall or straggler."""

from __future__ import annotations

from controller.observability.prometheus import Registry
from reconcile.policy import conditions as cond
from reconcile.sync.metrics import JobMetrics


def job(ns: str, conditions: list[dict[str, str]] | None = None) -> dict[str, object]:
    return {"metadata": {"namespace": ns, "name": "j"}, "status": {"conditions": conditions or []}}


def series(registry: Registry) -> dict[str, float]:
    out = {}
    for line in registry.expose().decode().splitlines():
        if line.startswith(("training_operator_jobs_", "tfjob_")):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_a_namespaces_first_job_brings_every_counter_of_it_at_zero() -> None:
    registry = Registry()
    metrics = JobMetrics(registry)
    assert series(registry) == {}
    metrics.job_seen(job("team-a"))
    labels = '{job_namespace="team-a",framework="tensorflow"}'
    assert series(registry) == {
        f"training_operator_jobs_created_total{labels}": 1.0,
        f"training_operator_jobs_deleted_total{labels}": 0.0,
        f"training_operator_jobs_successful_total{labels}": 0.0,
        f"training_operator_jobs_failed_total{labels}": 0.0,
        f"training_operator_jobs_restarted_total{labels}": 0.0,
        f"tfjob_stalls_total{labels}": 0.0,
        f"tfjob_stragglers_total{labels}": 0.0,
    }
    # a job another controller started is not created here, but its namespace's series
    # exist all the same; a transition in a namespace not seen before brings them too
    metrics.job_seen(job("team-b", [{"type": "Running", "status": "True"}]))
    metrics.transition(job("team-c"), cond.REASON_FAILED)
    now = series(registry)
    assert (
        now['training_operator_jobs_created_total{job_namespace="team-b",framework="tensorflow"}']
        == 0
    )
    assert now['tfjob_stalls_total{job_namespace="team-b",framework="tensorflow"}'] == 0
    assert (
        now['training_operator_jobs_failed_total{job_namespace="team-c",framework="tensorflow"}']
        == 1
    )
    assert now['tfjob_stragglers_total{job_namespace="team-c",framework="tensorflow"}'] == 0
