"""Fuzzing through the real apiserver and controller (issue 10).

TFJobs from ``broken_jobs`` (tests/strategies.py: valid ones, and ones broken on purpose
with each break recorded) are submitted, and each outcome is checked against what its
generator made invalid, never against the controller's own validation:

- a field the CRD refuses: the apiserver's 422 names one of the broken fields;
- a template field only the Pod API refuses: the job is accepted and Failed, reason
  FailedCreatePod, its message the Pod API's naming the broken pod field;
- nothing broken: the job gets exactly the pods its raw spec counts (owned by it, run by
  kwok) and Running when a Chief or a worker decides; Suspended and no pod if it asks;
  Succeeded and no pod when its Worker asks for none and no Chief decides; Created and
  no pod when it asks for none;
- a run-policy deadline of a second or two fails any accepted job that is not suspended
  or done at once, with upstream's message (or a Pod API refusal first).

Any other end (a refusal of a valid job, a Failed the generator did not cause, a
message naming none of the broken fields) fails with the job printed. Meanwhile an
unrelated job runs to Succeeded, /healthz never takes 1 s, and the controller never
exits.

Jobs go in batches of fifty at once, so that their grace periods overlap. ``make test``
runs 100 seeded jobs; ``make fuzz`` runs 1,000 (TFJOB_FUZZ_CLUSTER_EXAMPLES,
TFJOB_FUZZ_SEED).
"""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from reconcile.policy.conditions import msg_deadline
from tests.cluster.kube import (
    ControllerProcess,
    Kube,
    condition,
    is_true,
    wait_for,
    wait_job,
    wait_running,
)
from tests.cluster.policy_helpers import make_job, settled
from tests.cluster.test_hostile_input import HealthProbe
from tests.strategies import CHIEFS, BrokenJob, broken_jobs, dotted, pods_asked, succeeds_at_once

#: needs kwok pods that exit on the test's say
pytestmark = pytest.mark.local_only

EXAMPLES = int(os.environ.get("TFJOB_FUZZ_CLUSTER_EXAMPLES", "100"))
SEED = int(os.environ.get("TFJOB_FUZZ_SEED", "20261203"))
STATS: Counter[str] = Counter()
NS = f"fuzz-{uuid.uuid4().hex[:8]}"
#: jobs submitted together, one Hypothesis example
BATCH = 50


@pytest.fixture(scope="module")
def fuzz_ns(kube: Kube) -> Iterator[str]:
    kube.api.create_namespace(NS, {"tfjob-test": "1"})
    yield NS
    kube.req("DELETE", f"/api/v1/namespaces/{NS}")


@pytest.fixture(scope="module")
def probe(controller: ControllerProcess) -> Iterator[HealthProbe]:
    p = HealthProbe(controller.health_port)
    p.start()
    yield p
    p.done.set()


def test_an_unrelated_job_starts(
    controller: ControllerProcess, kube: Kube, fuzz_ns: str, probe: HealthProbe
) -> None:
    print(f"\nfuzz seed {SEED}, {EXAMPLES} cluster examples")
    kube.create_tfjob(fuzz_ns, make_job("bystander", chief="Never", workers=(1, "Never")))
    wait_running(kube, fuzz_ns, "bystander", 2, timeout=60)


def _owned(kube: Kube, ns: str, uid: str) -> set[str]:
    return {
        p["metadata"]["name"]
        for p in kube.pods(ns)
        if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])
    }


def _decides(spec: dict[str, Any]) -> bool:
    """Whether a pod of the job decides Running: a Chief or Master with a pod, else a
    worker (upstream's status rule; PS and Evaluators alone never make a job Running)."""
    specs = spec["tfReplicaSpecs"]
    chiefs = sum(s.get("replicas", 1) for k, s in specs.items() if k.lower() in CHIEFS)
    workers = sum(s.get("replicas", 1) for k, s in specs.items() if k.lower() == "worker")
    return bool(chiefs > 0 or workers > 0)


def _short_deadline(spec: dict[str, Any]) -> bool:
    """A run-policy deadline that passes while the test waits (the generator's 1 or 2 s)."""
    deadline = (spec.get("runPolicy") or {}).get("activeDeadlineSeconds")
    return deadline is not None and deadline <= 2


def _show(case: BrokenJob) -> str:
    return json.dumps({"job": case.job, "breaks": [vars(b) for b in case.breaks]}, indent=1)


@dataclass
class Submitted:
    case: BrokenJob
    name: str
    uid: str

    @property
    def spec(self) -> dict[str, Any]:
        out: dict[str, Any] = self.case.job["spec"]
        return out


def _outcome(sub: Submitted, job: dict[str, Any] | None, owned: set[str]) -> str | None:
    """How the job ended up, once it has: None while it is on its way."""
    failed = condition(job, "Failed")
    if failed is not None and failed["status"] == "True":
        return "failed"
    if is_true(job, "Succeeded"):
        return "succeeded"
    if is_true(job, "Suspended"):
        return "suspended"
    if _short_deadline(sub.spec):  # it will pass: wait for the end, not a moment before
        return None
    wanted = pods_asked(sub.name, sub.spec)
    if not wanted:  # nothing to run, nothing the Pod API could refuse
        return "created, no pod asked" if is_true(job, "Created") else None
    if sub.case.pod_refused or not wanted <= owned:
        return None
    return "running" if not _decides(sub.spec) or is_true(job, "Running") else None


def _outcomes(kube: Kube, ns: str, subs: list[Submitted]) -> dict[str, str] | None:
    """Every submitted job's outcome, from one list of jobs and one of pods; None until
    all have one."""
    jobs = {j["metadata"]["name"]: j for j in kube.req("GET", kube.tfjobs(ns))["items"]}
    owned: dict[str, set[str]] = {}
    for pod in kube.pods(ns):
        for ref in pod["metadata"].get("ownerReferences") or []:
            owned.setdefault(ref.get("uid", ""), set()).add(pod["metadata"]["name"])
    out, pending = {}, []
    for sub in subs:
        job, pods = jobs.get(sub.name), owned.get(sub.uid, set())
        end = _outcome(sub, job, pods)
        if end is None:
            conditions = [
                (c["type"], c["status"])
                for c in (job or {}).get("status", {}).get("conditions") or []
            ]
            pending.append(f"{sub.name} {conditions} pods {sorted(pods)}")
        else:
            out[sub.name] = end
    assert not pending, "; ".join(pending)  # wait_for shows the last
    return out


@pytest.mark.timeout(max(300, 2 * EXAMPLES))  # about 0.3 s a job; make fuzz runs 1,000
@seed(SEED)
@settings(
    max_examples=max(EXAMPLES // BATCH, 1),
    # no shrinking: each try is a batch on a real cluster; the failure names its job
    phases=[Phase.explicit, Phase.generate],
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(
    cases=st.lists(
        broken_jobs(),
        min_size=BATCH,
        max_size=BATCH,
        unique_by=lambda c: str(c.job["metadata"]["name"]),
    )
)
def test_each_outcome_is_what_the_generator_broke(
    controller: ControllerProcess, kube: Kube, fuzz_ns: str, cases: list[BrokenJob]
) -> None:
    """A batch of jobs at once (their creates, refusals and grace periods overlap), each
    checked on its own."""
    subs: list[Submitted] = []
    try:
        for case in cases:
            sub = _submit(kube, fuzz_ns, case)
            if sub is not None:
                subs.append(sub)
        ends = wait_for(lambda: _outcomes(kube, fuzz_ns, subs), 90, "every job's outcome")
        for sub in subs:
            _check_accepted(controller, kube, fuzz_ns, sub, ends[sub.name])
    finally:
        for sub in subs:
            kube.api.request("DELETE", f"{kube.tfjobs(fuzz_ns)}/{sub.name}")
        assert controller.proc is not None and controller.proc.poll() is None


def _submit(kube: Kube, ns: str, case: BrokenJob) -> Submitted | None:
    """Create the job; a refusal is checked here (None), an acceptance returned."""
    STATS["examples"] += 1
    job = {**case.job, "metadata": {"name": case.job["metadata"]["name"]}}
    name = job["metadata"]["name"]
    if name == "bystander":
        return None
    status, body = kube.api.request("POST", kube.tfjobs(ns), job)
    if status == 409:  # an earlier batch's name: make room
        kube.api.request("DELETE", f"{kube.tfjobs(ns)}/{name}")
        wait_for(lambda: kube.tfjob(ns, name) is None, 30, "deleted")
        status, body = kube.api.request("POST", kube.tfjobs(ns), job)
    if case.refused:
        message = body.get("message", "") if isinstance(body, dict) else str(body)
        assert status == 422, f"the CRD took a job broken in {status} {body}:\n{_show(case)}"
        assert any(b.path in dotted(message) for b in case.refused), (
            f"the refusal names none of the broken fields: {message}\n{_show(case)}"
        )
        STATS["refused at admission, naming a broken field"] += 1
        return None
    assert status == 201, f"the apiserver refused a job the CRD should take: {body}\n{_show(case)}"
    return Submitted(case, name, body["metadata"]["uid"])


def _check_accepted(
    controller: ControllerProcess, kube: Kube, ns: str, sub: Submitted, end: str
) -> None:
    case, name, spec = sub.case, sub.name, sub.spec
    run_policy = spec.get("runPolicy") or {}
    current = kube.tfjob(ns, name)
    if run_policy.get("suspend"):
        assert end == "suspended", f"a job asked to be suspended is {end}:\n{_show(case)}"
    if end == "suspended":
        assert run_policy.get("suspend"), f"a job suspended on its own:\n{_show(case)}"
        settled(kube, controller, ns, name)
        assert not _owned(kube, ns, sub.uid), f"a suspended job got pods:\n{_show(case)}"
        STATS["suspended, no pod"] += 1
        return
    if end == "failed":
        failed = condition(current, "Failed")
        assert failed is not None
        if _short_deadline(spec) and failed["reason"] == "TFJobFailed":
            assert failed["message"] == msg_deadline(name), (failed, _show(case))
            STATS["failed by its own deadline"] += 1
            return
        assert case.pod_refused, f"a valid job failed: {failed}\n{_show(case)}"
        assert failed["reason"] in ("FailedCreatePod", "FailedCreateService"), (
            f"{failed}\n{_show(case)}"
        )
        message = failed.get("message", "")
        assert "could not be created" in message and any(
            b.path in message for b in case.pod_refused
        ), f"the failure names none of the broken fields: {failed}\n{_show(case)}"
        STATS["failed: the Pod API refused a broken field"] += 1
        return
    if end == "succeeded":  # before any pod: a broken template is never used
        assert succeeds_at_once(spec), f"a job succeeded on its own:\n{_show(case)}"
        settled(kube, controller, ns, name)
        assert not _owned(kube, ns, sub.uid), f"a job done at once got pods:\n{_show(case)}"
        STATS["succeeded at once, no pod"] += 1
        return
    if end == "created, no pod asked":
        assert not succeeds_at_once(spec), f"a job with no Worker pod stays:\n{_show(case)}"
        settled(kube, controller, ns, name)
        assert not _owned(kube, ns, sub.uid), f"a job that asks for none got pods:\n{_show(case)}"
        assert not is_true(kube.tfjob(ns, name), "Failed"), _show(case)
        STATS["asks for no pod, gets none"] += 1
        return
    assert not case.pod_refused, f"a job whose pods the Pod API refuses {end}:\n{_show(case)}"
    assert not succeeds_at_once(spec), f"a job with nothing to run is running:\n{_show(case)}"
    wanted = pods_asked(name, spec)
    assert _owned(kube, ns, sub.uid) == wanted, (_owned(kube, ns, sub.uid), _show(case))
    STATS["valid: its pods, Running" if _decides(spec) else "valid: its pods"] += 1


def test_the_unrelated_job_succeeds_and_the_controller_stayed_healthy(
    controller: ControllerProcess, kube: Kube, fuzz_ns: str, probe: HealthProbe
) -> None:
    kube.exit_pod(fuzz_ns, "bystander-chief-0", 0)
    wait_job(kube, fuzz_ns, "bystander", "Succeeded", timeout=60)
    probe.done.set()
    print(
        "fuzz (cluster): "
        + ", ".join(f"{k} {v}" for k, v in sorted(STATS.items()))
        + f"; slowest /healthz {probe.slowest:.3f} s"
    )
    assert controller.proc is not None and controller.proc.poll() is None
    assert probe.failures == 0 and probe.slowest < 1.0, (probe.failures, probe.slowest)
