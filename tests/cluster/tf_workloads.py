"""TFJobs running real TensorFlow on the real node: the training programs of
tests/tf/programs/ in a ConfigMap mounted at /programs, the TensorFlow image, and the
progress lines the programs print, read back from the pods' logs."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hack.cluster import node as real_node_mod
from tests.cluster.kube import Kube, WatchThread, is_true, wait_for
from tests.conftest import Cluster

PROGRAMS = Path(__file__).resolve().parent.parent / "tf" / "programs"
PROGRAMS_CONFIGMAP = "tf-programs"
MOUNT = "/programs"


#: the project's reporting helper, as a user would copy it next to their program
REPORTER = PROGRAMS.parent.parent.parent / "tfjob_controller" / "progress.py"


def programs_configmap(kube: Kube, ns: str) -> None:
    """Every training program, and the reporting helper as ``tfjob_progress.py``, as
    files of one ConfigMap."""
    data = {p.name: p.read_text() for p in sorted(PROGRAMS.glob("*.py"))}
    data["tfjob_progress.py"] = REPORTER.read_text()
    body = {"metadata": {"name": PROGRAMS_CONFIGMAP}, "data": data}
    kube.req("POST", f"/api/v1/namespaces/{ns}/configmaps", body)


def tf_template(program: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod template running ``program`` (a file of tests/tf/programs/) on the real node."""
    container: dict[str, Any] = {
        "name": "tensorflow",
        "image": real_node_mod.TF_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["python3", f"{MOUNT}/{program}", *args],
        "volumeMounts": [{"name": "programs", "mountPath": MOUNT, "readOnly": True}],
    }
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {
        "spec": {
            "nodeSelector": dict(real_node_mod.NODE_LABELS),
            "tolerations": [{**real_node_mod.REAL_NODE_TAINT, "operator": "Equal"}],
            "terminationGracePeriodSeconds": 5,
            "containers": [container],
            "volumes": [{"name": "programs", "configMap": {"name": PROGRAMS_CONFIGMAP}}],
        }
    }


def tf_job(name: str, replicas: dict[str, tuple[int, str, dict[str, Any]]], **spec: Any) -> Any:
    """{replica type: (replicas, restartPolicy, template)} as a TFJob."""
    specs = {
        rtype: {"replicas": n, "restartPolicy": policy, "template": template}
        for rtype, (n, policy, template) in replicas.items()
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"tfReplicaSpecs": specs, **spec},
    }


def progress(cluster: Cluster, ns: str, pod: str, *extra: str) -> list[dict[str, Any]]:
    """The progress lines of a pod's training program, in order."""
    out = cluster.kubectl("logs", "-n", ns, pod, "-c", "tensorflow", *extra)
    return progress_of(out)


def progress_of(text: str) -> list[dict[str, Any]]:
    lines = []
    for line in text.splitlines():
        if line.startswith('{"tfjob_progress"'):
            lines.append(json.loads(line)["tfjob_progress"])
    return lines


def timed_progress(cluster: Cluster, ns: str, pod: str) -> list[tuple[datetime, dict[str, Any]]]:
    """The progress lines of a pod with the time the container runtime logged each at
    (``kubectl logs --timestamps``: the real node's clock, which is this machine's)."""
    out = cluster.kubectl("logs", "-n", ns, pod, "-c", "tensorflow", "--timestamps")
    lines = []
    for line in out.splitlines():
        stamp, _, text = line.partition(" ")
        if text.startswith('{"tfjob_progress"'):
            lines.append((parse_rfc3339(stamp), json.loads(text)["tfjob_progress"]))
    return lines


def parse_rfc3339(text: str) -> datetime:
    """An RFC 3339 time with up to nanoseconds (Python's parser takes microseconds)."""
    head, _, frac = text.rstrip("Z").partition(".")
    micros = f".{frac[:6]}" if frac else ""
    return datetime.fromisoformat(f"{head}{micros}+00:00")


def epoch_losses(lines: list[dict[str, Any]]) -> list[float]:
    return [float(x["loss"]) for x in lines if x.get("event") == "epoch"]


def wait_progress(
    cluster: Cluster, ns: str, pod: str, done: Callable[[dict[str, Any]], bool], timeout: float
) -> list[dict[str, Any]]:
    """The pod's progress lines once one of them satisfies ``done``."""

    def seen() -> list[dict[str, Any]] | None:
        try:
            lines = progress(cluster, ns, pod)
        except subprocess.CalledProcessError:
            return None  # not started yet
        return lines if any(done(x) for x in lines) else None

    return wait_for(seen, timeout, f"{ns}/{pod}: progress")


def with_backup(template: dict[str, Any], host_dir: Path) -> dict[str, Any]:
    """``template`` with ``host_dir`` (on the real node's host) at /backup: the directory
    every pod of the job shares, for BackupAndRestore."""
    spec = dict(template["spec"])
    spec["volumes"] = [
        *spec["volumes"],
        {"name": "backup", "hostPath": {"path": str(host_dir), "type": "DirectoryOrCreate"}},
    ]
    container = dict(spec["containers"][0])
    container["volumeMounts"] = [
        *container["volumeMounts"],
        {"name": "backup", "mountPath": "/backup"},
    ]
    spec["containers"] = [container]
    return {**template, "spec": spec}


def wait_finished(kube: Kube, ns: str, name: str, want: str, timeout: float) -> dict[str, Any]:
    """The job once it has finished, which must be ``want`` (Succeeded or Failed): a
    training run that ends the other way fails the test at once, with its conditions
    and pods' ends, rather than at the timeout."""

    def finished() -> dict[str, Any] | None:
        job = kube.tfjob(ns, name)
        conds = ((job or {}).get("status") or {}).get("conditions") or []
        done = [c for c in conds if c["type"] in ("Succeeded", "Failed") and c["status"] == "True"]
        return job if done else None

    job = wait_for(finished, timeout, f"{name} finished")
    if not is_true(job, want):
        ends = {
            p["metadata"]["name"]: [
                s.get("state", {}).get("terminated", {}).get("exitCode")
                for s in (p.get("status") or {}).get("containerStatuses") or []
            ]
            for p in kube.pods(ns, name)
        }
        raise AssertionError(f"{name} did not end {want}: {job['status']['conditions']}; {ends}")
    return job


class ProgressHistory(WatchThread):
    """Watches one TFJob and keeps, with the time this process saw it, each new
    ``status.trainingProgress``."""

    def __init__(self, cluster: Cluster, ns: str, name: str) -> None:
        self.name = name
        self.seen: list[tuple[datetime, dict[str, Any]]] = []
        super().__init__(cluster, f"/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs")

    def _observe(self, type_: str, obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"] != self.name:
            return
        got = (obj.get("status") or {}).get("trainingProgress")
        if got and (not self.seen or self.seen[-1][1] != got):
            self.seen.append((datetime.now(UTC), got))

    def first(self, want: Callable[[dict[str, Any]], bool]) -> tuple[datetime, dict[str, Any]]:
        """The first progress seen that ``want`` accepts."""
        for at, got in self.seen:
            if want(got):
                return at, got
        raise AssertionError(f"no trainingProgress as wanted among {self.seen}")
