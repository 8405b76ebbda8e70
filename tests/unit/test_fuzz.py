"""Fuzzing the pure path: parse -> validate -> default -> plan -> status, on hostile
input (tests/strategies.py).

Every drawn TFJob is planned twice: fresh, and again with the pods of the first plan
running and its status stored. Nothing may raise; an invalid job fails with a message
naming each offending field; a valid one gets exactly the pods its spec asks for.

Jobs broken on purpose (``broken_jobs``) are checked against the generator's record:
the controller's validation names a field that was broken and no other, passes every
job the generator left valid (the Pod API's business is not its), and a valid job gets
the pods counted from the raw spec.
``make test`` runs a short seeded run; ``make fuzz`` runs 10,000 examples
(TFJOB_FUZZ_EXAMPLES, TFJOB_FUZZ_SEED). Hypothesis shrinks a failure to a minimal spec.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings

from reconcile.api.spec import read_job
from reconcile.objects import cluster_spec
from reconcile.objects.observed import observe_all
from reconcile.plan import PlanConfig, Snapshot, compute_plan
from reconcile.policy import children
from tests.builders import at, make_tfjob
from tests.strategies import (
    BrokenJob,
    broken_jobs,
    dotted,
    pods_asked,
    succeeds_at_once,
    tfjobs,
)

EXAMPLES = int(os.environ.get("TFJOB_FUZZ_EXAMPLES", "400"))
SEED = int(os.environ.get("TFJOB_FUZZ_SEED", "20261203"))
CFG = PlanConfig()
STATS: Counter[str] = Counter()
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    print(f"\nfuzz seed {SEED}, {EXAMPLES} examples (TFJOB_FUZZ_SEED, TFJOB_FUZZ_EXAMPLES)")
    yield
    total = STATS["examples"]
    print(
        f"fuzz: {total} examples, {STATS['valid']} valid, {STATS['invalid']} invalid,"
        f" {STATS['crashes']} crashes"
    )
    broken = {k[7:]: v for k, v in sorted(STATS.items()) if k.startswith("broken ")}
    print("fuzz (broken on purpose): " + ", ".join(f"{k} {v}" for k, v in broken.items()))
    for rule, n in sorted(
        ((k, v) for k, v in STATS.items() if k.startswith("rule ")), key=lambda kv: -kv[1]
    ):
        print(f"  {n:6d}  {rule[5:]}")


def _rule(path: str, message: str) -> str:
    """The rule an error is for: map keys and quoted values generalised."""
    path = re.sub(r"\[.*?\](?=\.|$)", "[*]", path, flags=re.S)
    message = re.sub(r"\d+", "N", re.sub(r"(['\"]).*\1", "'…'", message, flags=re.S))
    return f"{path}: {message[:70]}"


def _running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for n, pod in enumerate(pods):
        meta = {**pod["metadata"], "uid": f"pod-{n}", "creationTimestamp": "2024-01-01T00:00:00Z"}
        out.append({**pod, "metadata": meta, "status": {"phase": "Running"}})
    return out


@seed(SEED)
@FUZZ
@given(tfjobs())
def test_hostile_specs_never_raise_and_invalid_ones_name_their_field(job: dict[str, Any]) -> None:
    STATS["examples"] += 1
    try:
        view = read_job(job)
        plan = compute_plan(Snapshot(view, [], [], at(100)), CFG)
    except Exception:
        STATS["crashes"] += 1  # counted for the report; Hypothesis shrinks and fails it
        raise
    if view.tfjob is None:
        STATS["invalid"] += 1
        assert view.spec.errors
        for error in view.spec.errors:
            assert error.path.startswith(("metadata", "spec")), error
            STATS["rule " + _rule(error.path, error.message)] += 1
        assert plan.create_pods == [] and plan.status is not None
        (failed,) = [c for c in plan.status["conditions"] if c["type"] == "Failed"]
        assert failed["reason"] == "TFJobFailedValidation"
        assert all(e.path in failed["message"] for e in view.spec.errors)
        return
    STATS["valid"] += 1
    tfjob = view.tfjob
    wanted = {
        f"{tfjob.name}-{rtype.lower()}-{i}"
        for rtype, spec in tfjob.replica_specs.items()
        for i in range(spec.count)
    }
    if view.run_policy.suspend:
        assert plan.create_pods == []
        return
    names = [p["metadata"]["name"] for p in plan.create_pods]
    assert len(names) == len(set(names)) and set(names) == wanted
    assert all(len(n) <= 63 for n in names)
    # Again, with those pods running and the status stored: still nothing raises.
    job = {**job, "status": plan.status}
    again = compute_plan(
        Snapshot(read_job(job), observe_all(_running(plan.create_pods)), [], at(101)), CFG
    )
    assert again.create_pods == []


def _related(error: str, path: str) -> bool:
    """The controller's error is about the broken field: the field itself, a part of it
    or what holds it (``containers`` for a container missing from it)."""
    return error.startswith(path) or path.startswith(error)


@seed(SEED)
@FUZZ
@given(broken_jobs())
def test_what_the_generator_broke_is_what_validation_names(case: BrokenJob) -> None:
    STATS["broken examples"] += 1
    try:
        view = read_job(case.job)
        plan = compute_plan(Snapshot(view, [], [], at(100)), CFG)
    except Exception:
        STATS["broken crashes"] += 1
        raise
    errors = [dotted(e.path) for e in view.spec.errors]
    # No error the generator cannot account for: a rule that refuses valid input.
    for error in errors:
        assert any(_related(error, b.path) for b in case.breaks), (error, case)
    if view.managed_by_other:  # another controller's job, even when it is invalid
        STATS["broken left to the controller it names"] += 1
        assert plan.skip_reason == "managed-by-other" and plan.create_pods == [], case
        return
    named = [b for b in case.refused if b.controller]
    if named:
        STATS["broken invalid, naming a broken field"] += 1
        assert view.tfjob is None, case
        assert any(_related(e, b.path) for e in errors for b in named), (errors, case)
        assert plan.status is not None
        (failed,) = [c for c in plan.status["conditions"] if c["type"] == "Failed"]
        assert failed["reason"] == "TFJobFailedValidation"
        assert any(
            b.path in dotted(failed["message"]) or e in dotted(failed["message"])
            for e in errors
            for b in named
        ), failed
        return
    if case.refused:
        STATS["broken refused by the CRD alone"] += 1  # a schema limit it does not repeat
        return
    assert view.tfjob is not None, (view.invalid_message, case)
    STATS["broken valid" if not case.breaks else "broken valid, pods the Pod API refuses"] += 1
    raw = case.job["spec"]
    if (raw.get("runPolicy") or {}).get("suspend"):
        assert plan.create_pods == []
        return
    if succeeds_at_once(raw):
        STATS["broken valid, succeeded at once"] += 1
        assert plan.create_pods == [] and plan.status is not None, case
        assert any(c["type"] == "Succeeded" for c in plan.status["conditions"]), plan.status
        return
    wanted = pods_asked(case.job["metadata"]["name"], raw)
    assert {p["metadata"]["name"] for p in plan.create_pods} == wanted, case


@pytest.mark.parametrize("replicas", [10, 100, 1000])
def test_the_cluster_is_laid_out_once_a_plan_however_many_pods(
    replicas: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each pod's TF_CONFIG lists the whole cluster, so its bytes grow with the job; the
    work of laying the cluster out must not grow per pod (it did, when the cluster was
    rebuilt for every pod: 12 s for 3,000). Counted, not timed: one address per member,
    one layout a plan. (hack/bench_planning.py reports the time per pod.)"""
    calls: Counter[str] = Counter()
    for name in ("address", "cluster_layout"):
        real = getattr(cluster_spec, name)

        def counting(*a: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            calls[_name] += 1
            return _real(*a, **kw)

        monkeypatch.setattr(cluster_spec, name, counting)
        if name == "cluster_layout":
            monkeypatch.setattr(children, name, counting)
    job = read_job(make_tfjob("t").chief().ps(1).worker(replicas - 2).obj())
    plan = compute_plan(Snapshot(job, [], [], at(100)), CFG)
    assert len(plan.create_pods) == replicas
    assert calls == {"address": replicas, "cluster_layout": 1}
