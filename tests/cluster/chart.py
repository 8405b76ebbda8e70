"""The Helm chart rendered, and its objects compared with config/default's."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import REPO, Cluster

CHART = REPO / "charts" / "tfjob-controller"
RELEASE = "tfjob-controller"
NAMESPACE = "kubeflow"
#: what Helm's conventions add to every object of a release, and the chart's CRD keeps
HELM_LABELS = (
    "helm.sh/chart",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
)
HELM_ANNOTATIONS = ("helm.sh/resource-policy",)

Doc = dict[str, Any]


def helm(tools: Path, *args: str, kubeconfig: str | None = None, timeout: float = 300) -> str:
    cmd = [str(tools / "helm"), *args]
    if kubeconfig:
        cmd.append(f"--kubeconfig={kubeconfig}")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def render(tools: Path, *sets: str, namespace: str = NAMESPACE) -> list[Doc]:
    """``helm template`` with ``--set`` for each of ``sets``."""
    args = ["template", RELEASE, str(CHART), f"--namespace={namespace}"]
    for s in sets:
        args += ["--set", s]
    return [d for d in yaml.safe_load_all(helm(tools, *args)) if d]


def hooks(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if "helm.sh/hook" in (d["metadata"].get("annotations") or {})]


def release_objects(docs: list[Doc]) -> list[Doc]:
    """What the release itself owns (not its hooks)."""
    return [d for d in docs if "helm.sh/hook" not in (d["metadata"].get("annotations") or {})]


def kustomized(cluster: Cluster) -> list[Doc]:
    out = cluster.kubectl("kustomize", str(REPO / "config" / "default"))
    return [d for d in yaml.safe_load_all(out) if d]


def without_helm_metadata(doc: Doc) -> Doc:
    out = copy.deepcopy(doc)
    meta = out["metadata"]
    for key, names in (("labels", HELM_LABELS), ("annotations", HELM_ANNOTATIONS)):
        kept = {k: v for k, v in (meta.get(key) or {}).items() if k not in names}
        if kept:
            meta[key] = kept
        else:
            meta.pop(key, None)
    return out


def by_identity(docs: list[Doc]) -> dict[tuple[str, str, str], Doc]:
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs}


def deployment(docs: list[Doc]) -> Doc:
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    return dep


def manager_args(docs: list[Doc]) -> list[str]:
    return list(deployment(docs)["spec"]["template"]["spec"]["containers"][0]["args"])
