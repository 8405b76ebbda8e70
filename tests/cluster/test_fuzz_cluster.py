"""Fuzzing through the real apiserver and controller (issue 10).

Hostile TFJobs (tests/strategies.py, small replica counts) are submitted one after the
other. Each is either refused at admission with a message naming a field, or accepted,
and then the controller agrees it is valid and reconciles it to what it asks for: its
pods (owned by it) or, if the Pod API refuses a field our schema leaves open, Failed
with the apiserver's message; Suspended if it asks to be. Meanwhile an unrelated job
runs to Succeeded, /healthz never takes 1 s, and the controller never exits.

``make test`` runs 100 seeded examples; ``make fuzz`` runs 1,000
(TFJOB_FUZZ_CLUSTER_EXAMPLES, TFJOB_FUZZ_SEED).
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings

from reconcile.conditions import msg_deadline
from reconcile.spec import read_job
from tests.cluster.kube import ControllerProcess, Kube, condition, wait_for, wait_job, wait_running
from tests.cluster.policy_helpers import make_job
from tests.cluster.test_hostile_input import HealthProbe
from tests.strategies import small_replica_counts, tfjobs

#: needs kwok pods that exit on the test's say
pytestmark = pytest.mark.local_only

EXAMPLES = int(os.environ.get("TFJOB_FUZZ_CLUSTER_EXAMPLES", "100"))
SEED = int(os.environ.get("TFJOB_FUZZ_SEED", "20261203"))
STATS: Counter[str] = Counter()
NS = f"fuzz-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def fuzz_ns(kube: Kube) -> Iterator[str]:
    kube.req(
        "POST", "/api/v1/namespaces", {"metadata": {"name": NS, "labels": {"tfjob-test": "1"}}}
    )
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


@seed(SEED)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(job=tfjobs(small_replica_counts, plausible=True))
def test_hostile_specs_are_refused_naming_a_field_or_reconciled(
    controller: ControllerProcess, kube: Kube, fuzz_ns: str, job: dict[str, Any]
) -> None:
    STATS["examples"] += 1
    job["metadata"] = {"name": job["metadata"]["name"]}
    if job["metadata"]["name"] == "bystander":
        return
    status, body = kube.api.request("POST", kube.tfjobs(fuzz_ns), job)
    if status == 409:  # an earlier example's name: make room
        kube.api.request("DELETE", f"{kube.tfjobs(fuzz_ns)}/{job['metadata']['name']}")
        wait_for(lambda: kube.tfjob(fuzz_ns, job["metadata"]["name"]) is None, 30, "deleted")
        status, body = kube.api.request("POST", kube.tfjobs(fuzz_ns), job)
    if status != 201:
        STATS["refused"] += 1
        assert status in (400, 422), (status, body)
        message = body["message"] if isinstance(body, dict) else str(body)
        assert "metadata." in message or "spec" in message, message
        return
    STATS["accepted"] += 1
    name, uid = body["metadata"]["name"], body["metadata"]["uid"]
    view = read_job(body)
    assert view.tfjob is not None, (
        f"admission accepted what the controller refuses: {view.invalid_message}"
    )
    try:
        if view.run_policy.suspend:
            wait_job(kube, fuzz_ns, name, "Suspended")
            STATS["suspended"] += 1
            return
        wanted = {
            f"{name}-{rtype.lower()}-{i}"
            for rtype, spec in view.tfjob.replica_specs.items()
            for i in range(spec.count)
        }

        if not wanted:
            STATS["asks for no pod"] += 1  # counted apart: "created" would say nothing

        def reconciled() -> str | None:
            current = kube.tfjob(fuzz_ns, name)
            failed = condition(current, "Failed")
            if failed is not None and failed["status"] == "True":
                return f"failed: {failed['reason']}"
            if condition(current, "Succeeded") is not None:
                return "succeeded"
            return "created" if wanted <= _owned(kube, fuzz_ns, uid) else None

        outcome = wait_for(reconciled, 60, f"{name} reconciled")
        STATS[outcome] += 1
        if outcome.startswith("failed"):
            failed = condition(kube.tfjob(fuzz_ns, name), "Failed")
            assert failed is not None
            _explained(kube, fuzz_ns, body, failed)
    finally:
        kube.api.request("DELETE", f"{kube.tfjobs(fuzz_ns)}/{name}")
        assert controller.proc is not None and controller.proc.poll() is None


def _template_refused(kube: Kube, ns: str, job: dict[str, Any]) -> str | None:
    """The Pod API's refusal of one of the job's templates taken as it is (a server-side
    dry run), if one is refused: the job asked for a pod no controller could make."""
    for rtype, spec in job["spec"]["tfReplicaSpecs"].items():
        template = spec.get("template") or {}
        policy = spec.get("restartPolicy") or "Never"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**(template.get("metadata") or {}), "name": f"probe-{rtype.lower()}"},
            "spec": {
                **(template.get("spec") or {}),
                "restartPolicy": "Never" if policy == "ExitCode" else policy,
            },
        }
        status, out = kube.api.request("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", pod)
        if status in (400, 422):
            return str(out.get("message") if isinstance(out, dict) else out)
    return None


def _explained(kube: Kube, ns: str, job: dict[str, Any], failed: dict[str, Any]) -> None:
    """An accepted job may fail only for what the generator put in it: a deadline it set
    (upstream's message), or a template the Pod API refuses on its own (the refusal in
    the condition). Anything else is the controller's doing: a pod it built wrong."""
    name = job["metadata"]["name"]
    reason, message = failed["reason"], failed.get("message", "")
    deadline = (job["spec"].get("runPolicy") or {}).get("activeDeadlineSeconds")
    if reason == "TFJobFailed" and deadline is not None:
        assert message == msg_deadline(name), failed
        STATS["failed by its own deadline"] += 1
        return
    if reason in ("FailedCreatePod", "FailedCreateService"):
        refused = _template_refused(kube, ns, job)
        assert refused is not None, f"the Pod API takes every template, yet {failed}"
        assert "could not be created" in message, failed
        STATS["failed: a template the Pod API refuses"] += 1
        return
    raise AssertionError(f"an accepted job failed for nothing it asked for: {failed}")


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
