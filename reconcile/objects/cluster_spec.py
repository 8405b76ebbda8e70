"""TF_CONFIG: the cluster description every TensorFlow process reads (docs/semantics.md#tf_config).

The value is byte-identical to upstream's except where TensorFlow itself refuses or hangs
on upstream's (below), because user code and TensorFlow's ``TFConfigClusterResolver``
parse it and people diff it when debugging. Upstream builds it with Go's
``json.Marshal``, which means:

- compact output, no spaces;
- map keys sorted (the ``cluster`` map), struct fields in declaration order
  (``cluster``, ``task{type,index}``, ``environment``);
- ``<``, ``>``, ``&``, U+2028 and U+2029 escaped as ``\\u003c`` etc.;
- a nil slice marshals as ``null`` (the sparse form's ``"ps":null`` when there is no PS;
  we write ``[]``, below).

Where TensorFlow showed upstream's value to be wrong (tests/cluster/test_tf_ps.py):

- no task's ``cluster`` lists the evaluators. A sidecar evaluator runs no server and joins
  no cluster; ParameterServerStrategy's coordinator connects to every task its cluster
  names and waits for the evaluator forever (kubeflow/trainer#1213), and TensorFlow's
  cluster validation refuses a cluster with more than one evaluator on *every* task.
  TensorFlow allows an evaluator's own task to be missing from its cluster, so each
  evaluator gets the training cluster and its task;
- the sparse form of a job without PS has ``"ps":[]``: ``tf.train.ClusterSpec`` raises a
  TypeError on ``null``.

Dynamic workers (``enableDynamicWorker``) get upstream's sparse form: each worker sees only
itself and the PS list, each PS only itself, so workers can come and go without the others'
configs going stale. Deliberate fix (upstream #1763, unmerged PR #1764): upstream gives the
Chief/Master an empty cluster, so the coordinator cannot reach any worker or PS. We give the
Chief/Master the full, dense TF_CONFIG instead — the same value a non-dynamic job gets — since
the coordinator of parameter-server training must address every worker and PS. The Evaluator
keeps upstream's empty sparse cluster: it only reads checkpoints and joins no cluster.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from reconcile.api.labels import replica_name
from reconcile.api.names import (
    CHIEF_TYPES,
    DEFAULT_PORT,
    DEFAULT_PORT_NAME,
    STATUS_ORDER,
    ReplicaType,
    tensorflow_container_index,
)

TF_CONFIG_ENV = "TF_CONFIG"


@dataclass(frozen=True)
class ClusterMember:
    """What TF_CONFIG needs to know about one replica type."""

    replicas: int
    port: int = DEFAULT_PORT


def tensorflow_container(template: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The first container named ``tensorflow`` in a pod template, if any."""
    spec = template.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    index = tensorflow_container_index(containers)
    return None if containers is None or index is None else containers[index]


def tf_port(template: Mapping[str, Any]) -> int:
    """containerPort of the ``tfjob-port`` port of the tensorflow container, else 2222."""
    container = tensorflow_container(template)
    if container is not None:
        for port in container.get("ports") or []:
            if isinstance(port, Mapping) and port.get("name") == DEFAULT_PORT_NAME:
                value = port.get("containerPort")
                if isinstance(value, int):
                    return value
    return DEFAULT_PORT


def is_distributed(members: Mapping[str, ClusterMember]) -> bool:
    """Upstream sets no TF_CONFIG when the known replica types add up to exactly one pod."""
    return sum(m.replicas for rt, m in members.items() if rt in STATUS_ORDER) != 1


def address(
    job_name: str, namespace: str, rtype: str, index: int, port: int, cluster_domain: str | None
) -> str:
    host = f"{replica_name(job_name, rtype, index)}.{namespace}.svc"
    if cluster_domain:
        host = f"{host}.{cluster_domain}"
    return f"{host}:{port}"


def go_json(value: Any) -> str:
    """Serialise like Go's json.Marshal: compact, HTML-safe escaping, UTF-8 kept as is."""
    try:
        text = orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        # what orjson refuses and json writes: a lone surrogate, an int beyond 64 bits
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


@dataclass(frozen=True)
class ClusterLayout:
    """A job's cluster, built and serialised once per pass and shared by every pod's
    TF_CONFIG: each value embeds the whole cluster, so rebuilding it per pod made
    planning quadratic in the replica count."""

    cluster: dict[str, list[str]]
    cluster_json: str  # go_json(cluster)
    distributed: bool
    dynamic_worker: bool = False

    def tf_config(self, rtype: str, index: int) -> str | None:
        """The TF_CONFIG value for pod (rtype, index), or None for a single-replica job."""
        if not self.distributed:
            return None
        task = go_json({"type": rtype.lower(), "index": index})
        if self.dynamic_worker and rtype not in CHIEF_TYPES:
            sparse = _sparse(self.cluster, rtype.lower(), index)
            return f'{{"cluster":{go_json(sparse)},"task":{task}}}'
        # The same bytes go_json gives for the whole object: compact JSON concatenates.
        return f'{{"cluster":{self.cluster_json},"task":{task},"environment":"cloud"}}'


def cluster_layout(
    job_name: str,
    namespace: str,
    members: Mapping[str, ClusterMember],
    *,
    cluster_domain: str | None = None,
    dynamic_worker: bool = False,
) -> ClusterLayout:
    """The cluster {lower(rtype): [address of index 0, 1, ...]}, sorted by key."""
    cluster: dict[str, list[str]] = {}
    distributed = is_distributed(members)
    for rtype in sorted(members, key=str.lower) if distributed else ():
        if rtype == ReplicaType.EVALUATOR:
            continue  # joins no cluster: see the module's docstring
        m = members[rtype]
        cluster[rtype.lower()] = [
            address(job_name, namespace, rtype, i, m.port, cluster_domain)
            for i in range(m.replicas)
        ]
    return ClusterLayout(cluster, go_json(cluster), distributed, dynamic_worker)


def _sparse(cluster: Mapping[str, list[str]], rtype: str, index: int) -> dict[str, Any]:
    # Field order worker, ps: the order of upstream's SparseClusterSpec struct.
    workers: dict[str, str] = {}
    ps: list[str] = []
    if rtype == "ps":
        ps = [cluster["ps"][index]]
    elif rtype == "worker":
        workers[str(index)] = cluster["worker"][index]
        # Upstream's job without PS has a nil slice here, which marshals as null: a
        # TypeError in tf.train.ClusterSpec. An empty list says the same and parses.
        ps = list(cluster.get("ps", ()))
    return {"worker": workers, "ps": ps}
