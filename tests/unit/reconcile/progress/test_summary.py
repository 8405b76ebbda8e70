"""Records of reports, and trainingProgress summarised from them (a table of cases)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

from reconcile.api.status_types import JobStatus
from reconcile.progress.records import RATE_SAMPLES, ReplicaRecord, Reporter, record
from reconcile.progress.summary import LAGGARDS, LIST_ALL, summarize
from reconcile.progress.wire import Report

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def who(rtype: str = "Worker", index: int = 0, uid: str | None = None) -> Reporter:
    return Reporter(rtype, index, f"j-{rtype.lower()}-{index}", uid or f"{rtype}-{index}", "n1")


def reports(w: Reporter, steps: list[int], every: float = 5.0, **kw: object) -> ReplicaRecord:
    rec = None
    for i, step in enumerate(steps):
        rec = record(rec, w, Report(step=step, **kw), T0 + timedelta(seconds=i * every))  # type: ignore[arg-type]
    assert rec is not None
    return rec


def test_a_rate_over_the_recent_reports() -> None:
    rec = reports(who(), [0, 50, 100])
    assert rec.steps_per_second == 10.0
    assert len(reports(who(), list(range(0, 2000, 100))).samples) == RATE_SAMPLES


def test_a_new_pod_or_a_step_back_starts_afresh() -> None:
    rec = reports(who(), [0, 50, 100])
    later = T0 + timedelta(seconds=20)
    assert record(rec, who(uid="other"), Report(step=120), later).samples == (
        (later.timestamp(), 120),
    )
    resumed = record(rec, who(), Report(step=40), later)  # restored from a checkpoint
    assert len(resumed.samples) == 1 and resumed.steps_per_second is None


def test_nothing_reported_is_none() -> None:
    assert summarize([], frozenset({"a"})) is None
    # a record of a pod that is gone counts for nothing
    assert summarize([reports(who(), [1])], frozenset({"other"})) is None


def test_the_chief_reports_for_the_job() -> None:
    chief = reports(who("Chief"), [0, 20, 40], total_steps=400, epoch=1, total_epochs=4)
    worker = reports(who("Worker", 0), [0, 30, 60], total_steps=400)
    p = summarize([worker, chief], frozenset({"Chief-0", "Worker-0"}))
    assert p is not None
    assert (p.reporter, p.step, p.total_steps, p.percent) == ("chief-0", 40, 400, 10)
    assert (p.epoch, p.total_epochs, p.steps_per_second) == (1, 4, 4.0)
    # 360 steps at 4 a second, from the chief's last report
    assert p.estimated_remaining == "1m30s"
    assert p.estimated_completion_time == T0 + timedelta(seconds=10 + 90)
    assert p.last_report_time == T0 + timedelta(seconds=10)
    assert set(p.replicas) == {"Chief", "Worker"}


def test_worker_0_without_a_chief_and_epochs_without_steps() -> None:
    w0 = reports(who("Worker", 0), [5], epoch=2, total_epochs=8, metrics={"loss": 0.123456789})
    w1 = reports(who("Worker", 1), [7])
    p = summarize([w1, w0], frozenset({"Worker-0", "Worker-1"}))
    assert p is not None
    assert (p.reporter, p.step, p.percent, p.estimated_remaining) == ("worker-0", 5, 25, None)
    assert p.metrics == {"loss": 0.123457}


def test_a_final_report_is_100_percent() -> None:
    p = summarize([reports(who(), [0, 10], final=True)], frozenset({"Worker-0"}))
    assert p is not None and p.percent == 100 and p.estimated_remaining == "0s"


def test_a_type_is_summarised_and_bounded() -> None:
    many = [reports(who("Worker", i), [0, 10 * i]) for i in range(40)]
    live = frozenset(r.who.pod_uid for r in many)
    p = summarize(many, live)
    assert p is not None
    t = p.replicas["Worker"]
    assert (t.reporting, t.min_step, t.median_step, t.max_step) == (40, 0, 190, 390)
    assert len(t.replicas) == LAGGARDS
    assert [r.index for r in t.replicas] == list(range(LAGGARDS))  # the furthest behind
    few = summarize(many[:LIST_ALL], frozenset(r.who.pod_uid for r in many[:LIST_ALL]))
    assert few is not None and len(few.replicas["Worker"].replicas) == LIST_ALL
    # the bound: a 1,000-replica job's progress stays small
    big = [reports(who("Worker", i), [0, i]) for i in range(1000)]
    bp = summarize(big, frozenset(r.who.pod_uid for r in big))
    assert bp is not None
    size = len(
        JobStatus(training_progress=bp).model_dump_json(by_alias=True, exclude_defaults=True)
    )
    assert size < 4096


def test_summaries_depend_on_the_records_alone() -> None:
    recs = [reports(who("Worker", i), [0, 10, 20], total_steps=100) for i in range(3)]
    before = copy.deepcopy(recs)
    live = frozenset(r.who.pod_uid for r in recs)
    assert summarize(recs, live) == summarize(list(reversed(recs)), live)
    assert recs == before


def test_a_report_without_metrics_keeps_the_last_ones() -> None:
    rec = record(None, who(), Report(step=10, metrics={"loss": 0.5}), T0)
    rec = record(rec, who(), Report(step=20), T0 + timedelta(seconds=5))
    assert rec.report.metrics == {"loss": 0.5} and rec.report.step == 20
    fresh = record(rec, who(uid="next-pod"), Report(step=1), T0 + timedelta(seconds=9))
    assert fresh.report.metrics == {}
