"""`tfjob-controller explain` against the real thing: for each sample and a few upstream
examples, what explain predicts (from the file, with no cluster) is what the controller
creates on the cluster, field by field. Fields the apiserver adds (defaults, status, uid)
are ignored: only what the predicted body says is compared.

Gang scheduling on the cluster is tested in test_gang_scheduler.py; here it is off, as in
the session controller.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconcile.api.quantity import parse_quantity
from reconcile.explain import PLACEHOLDER_UID, explain
from reconcile.objects.reporting import Reporting
from reconcile.plan import PlanConfig
from tests import conformance
from tests.cluster.kube import ControllerProcess, Kube, wait_for
from tests.unit.reconcile.api.test_models import SAMPLES

CASES = [pytest.param(p, id=p.name) for p in [*SAMPLES, *conformance.examples()]]
MISSING = object()


def explain_cli(path: Path, namespace: str, progress_url: str) -> list[dict[str, Any]]:
    """The objects `tfjob-controller explain` prints for the file, in ``namespace``, for
    a controller whose training-progress endpoint is ``progress_url``."""
    exe = Path(sys.executable).parent / "tfjob-controller"
    out = subprocess.run(
        [str(exe), "explain", "-f", str(path), "-n", namespace, "--progress-url", progress_url],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d is not None]


def subset(want: Any, have: Any, path: str, out: list[str]) -> None:
    """Every field of ``want`` is in ``have`` with the same value (quantities by amount);
    what ``have`` has besides (apiserver defaults) is ignored."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            out.append(f"{path}: want an object, have {have!r}")
            return
        for key, value in want.items():
            subset(value, have.get(key, MISSING), f"{path}.{key}", out)
    elif isinstance(want, list):
        if not isinstance(have, list) or len(have) != len(want):
            out.append(f"{path}: want {want!r}, have {have!r}")
            return
        for i, (w, h) in enumerate(zip(want, have, strict=True)):
            subset(w, h, f"{path}[{i}]", out)
    elif ".resources." in path:
        if have is MISSING or parse_quantity(want) != parse_quantity(have):
            out.append(f"{path}: want {want!r}, have {have!r}")
    elif want != have:
        out.append(f"{path}: want {want!r}, have {'(missing)' if have is MISSING else repr(have)}")


def equal(want: Any, have: Any, path: str, out: list[str]) -> None:
    if want != have:
        out.append(f"{path}: want {want!r}, have {have!r}")


def compare_meta(want: dict[str, Any], have: dict[str, Any], uid: str, out: list[str]) -> None:
    w, h = want["metadata"], have["metadata"]
    name = w["name"]
    equal(w["name"], h["name"], f"{name}: metadata.name", out)
    equal(w["namespace"], h["namespace"], f"{name}: metadata.namespace", out)
    equal(w.get("labels"), h.get("labels"), f"{name}: metadata.labels", out)
    equal(w.get("annotations"), h.get("annotations"), f"{name}: metadata.annotations", out)
    equal(w.get("finalizers"), h.get("finalizers"), f"{name}: metadata.finalizers", out)
    # explain ran on the file, which has no uid: the placeholder stands for the real one
    (ref,) = w["ownerReferences"]
    assert ref["uid"] == PLACEHOLDER_UID
    subset([{**ref, "uid": uid}], h.get("ownerReferences"), f"{name}: ownerReferences", out)


def compare_pod(want: dict[str, Any], have: dict[str, Any], uid: str, out: list[str]) -> None:
    name = want["metadata"]["name"]
    compare_meta(want, have, uid, out)
    w, h = want["spec"], have["spec"]
    equal(w["restartPolicy"], h["restartPolicy"], f"{name}: spec.restartPolicy", out)
    if "schedulerName" in w:
        equal(w["schedulerName"], h.get("schedulerName"), f"{name}: spec.schedulerName", out)
    wc, hc = w["containers"], h["containers"]
    equal([c["name"] for c in wc], [c["name"] for c in hc], f"{name}: container names", out)
    for i, (c, d) in enumerate(zip(wc, hc, strict=False)):
        where = f"{name}: spec.containers[{i}]"
        for key in ("image", "command", "args"):
            equal(c.get(key), d.get(key), f"{where}.{key}", out)
        wenv, henv = c.get("env") or [], d.get("env") or []
        equal([e["name"] for e in wenv], [e["name"] for e in henv], f"{where}.env names", out)
        for e, f in zip(wenv, henv, strict=False):
            if e["name"] == "TF_CONFIG":
                # equal as parsed JSON (upstream's byte layout is the unit tests' concern)
                equal(json.loads(e["value"]), json.loads(f["value"]), f"{where}.env TF_CONFIG", out)
            else:
                subset(e, f, f"{where}.env[{e['name']}]", out)
        subset(c.get("ports", []), d.get("ports", []), f"{where}.ports", out)
        subset(c.get("resources", {}), d.get("resources", {}), f"{where}.resources", out)
        # ServiceAccount admission adds its own mount and volume: ours are among them
        have_mounts = {m["name"]: m for m in d.get("volumeMounts") or []}
        for m in c.get("volumeMounts") or []:
            subset(m, have_mounts.get(m["name"], MISSING), f"{where}.volumeMounts", out)
    have_volumes = {v["name"]: v for v in h.get("volumes") or []}
    for v in w.get("volumes") or []:
        subset(v, have_volumes.get(v["name"], MISSING), f"{name}: spec.volumes", out)


def compare_service(want: dict[str, Any], have: dict[str, Any], uid: str, out: list[str]) -> None:
    name = want["metadata"]["name"]
    compare_meta(want, have, uid, out)
    w, h = want["spec"], have["spec"]
    assert w["clusterIP"] == "None"
    equal(w["clusterIP"], h.get("clusterIP"), f"{name}: spec.clusterIP", out)
    equal(w["selector"], h.get("selector"), f"{name}: spec.selector", out)
    subset(w["ports"], h.get("ports"), f"{name}: spec.ports", out)
    subset(w, h, f"{name}: spec", out)


@pytest.mark.parametrize("path", CASES)
def test_explain_predicts_what_the_controller_creates(
    path: Path, controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "TFJob"]
    (doc,) = docs
    name = doc["metadata"]["name"]
    predicted = explain_cli(path, namespace, controller.progress.url)
    want_pods = {o["metadata"]["name"]: o for o in predicted if o["kind"] == "Pod"}
    want_svcs = {o["metadata"]["name"]: o for o in predicted if o["kind"] == "Service"}
    replicas = sum(s.get("replicas", 1) for s in doc["spec"]["tfReplicaSpecs"].values())
    assert len(want_pods) == len(want_svcs) == replicas
    assert len(predicted) == 2 * replicas  # no PodGroup without gang scheduling

    # the same file on the cluster, in the test's namespace (some examples name kubeflow)
    doc["metadata"]["namespace"] = namespace
    created = kube.create_tfjob(namespace, doc)
    uid = created["metadata"]["uid"]

    def all_made() -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        pods, svcs = kube.pods(namespace, name), kube.services(namespace, name)
        if len(pods) >= replicas and len(svcs) >= replicas:
            return pods, svcs
        return None

    pods, svcs = wait_for(all_made, 60, f"{replicas} pods and services of {name}")
    assert sorted(p["metadata"]["name"] for p in pods) == sorted(want_pods)
    assert sorted(s["metadata"]["name"] for s in svcs) == sorted(want_svcs)
    mismatches: list[str] = []
    for pod in pods:
        compare_pod(want_pods[pod["metadata"]["name"]], pod, uid, mismatches)
    for svc in svcs:
        compare_service(want_svcs[svc["metadata"]["name"]], svc, uid, mismatches)
    assert not mismatches, "\n".join(mismatches)

    # The stored job (the CRD's schema defaults applied, its real uid) explains to the
    # same bodies: the schema's defaults and the controller's agree.
    stored = kube.tfjob(namespace, name)
    assert stored is not None
    config = PlanConfig(reporting=Reporting(controller.progress.url))
    again = explain(stored, config, datetime.now(UTC))
    assert again.objects == json.loads(json.dumps(predicted).replace(PLACEHOLDER_UID, uid))
