"""Headless services: one per replica, named like its pod (docs/semantics.md#services).

Differences from upstream, on purpose:
- ``publishNotReadyAddresses: true``: TensorFlow processes resolve their peers at start-up,
  before those peers are Ready; without it the DNS records appear late and workers exit on
  lookup failures (upstream #1458).
- only *named* ports are exposed, once per name: upstream keys ports by name, so unnamed
  ports collapse into one entry with an empty name that the API server rejects.
- the plan guarantees exactly one service per live index: a second owned service with the
  same replica labels (an adopted orphan under another name) is deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.types import JSON
from reconcile.api.labels import replica_labels, replica_name
from reconcile.objects.cluster_spec import tensorflow_container
from reconcile.objects.pods import JobRef, owner_reference


def service_ports(template: Mapping[str, Any]) -> list[JSON]:
    """[{name, port}] for each named port of the tensorflow container, first one wins."""
    container = tensorflow_container(template)
    ports: list[JSON] = []
    seen: set[str] = set()
    for port in (container or {}).get("ports") or []:
        if not isinstance(port, Mapping):
            continue
        name, number = port.get("name"), port.get("containerPort")
        if not isinstance(name, str) or not name or name in seen or not isinstance(number, int):
            continue
        seen.add(name)
        entry: JSON = {"name": name, "port": number}
        protocol = port.get("protocol")
        if isinstance(protocol, str) and protocol != "TCP":
            entry["protocol"] = protocol
        ports.append(entry)
    return ports


def build_service(
    job: JobRef,
    rtype: str,
    index: int,
    template: Mapping[str, Any],
    *,
    operator_name: str,
) -> JSON:
    """The headless Service addressing pod (rtype, index)."""
    labels = replica_labels(job.name, rtype, index, operator_name)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": replica_name(job.name, rtype, index),
            "namespace": job.namespace,
            "labels": dict(labels),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": dict(labels),
            "ports": service_ports(template),
            "publishNotReadyAddresses": True,
        },
    }
