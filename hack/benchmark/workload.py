"""The workload: N TFJobs of 1 Chief + M-1 Workers, and the children the controller's
own planner would create for each."""

from __future__ import annotations

from datetime import datetime
from typing import Any


def tfjob_body(name: str, namespace: str, replicas: int) -> dict[str, Any]:
    container = {"name": "tensorflow", "image": "bench/tf:none", "command": ["train"]}
    specs: dict[str, Any] = {}
    if replicas >= 2:
        specs["Chief"] = {
            "replicas": 1,
            "restartPolicy": "Never",
            "template": {"spec": {"containers": [container]}},
        }
        specs["Worker"] = {
            "replicas": replicas - 1,
            "restartPolicy": "Never",
            "template": {"spec": {"containers": [container]}},
        }
    else:
        specs["Worker"] = {
            "replicas": 1,
            "restartPolicy": "Never",
            "template": {"spec": {"containers": [container]}},
        }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runPolicy": {"cleanPodPolicy": "None"}, "tfReplicaSpecs": specs},
    }


def job_names(n: int) -> list[str]:
    return [f"bench-{i:04d}" for i in range(n)]


def planned_children(job: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Exactly the pod and service bodies the controller POSTs for a new job, from its
    own (pure) planner."""
    from reconcile.api.spec import read_job
    from reconcile.plan import PlanConfig, Snapshot, compute_plan

    snap = Snapshot(job=read_job(job), pods=[], services=[], now=datetime.now().astimezone())
    plan = compute_plan(snap, PlanConfig())
    return plan.create_pods, plan.create_services
