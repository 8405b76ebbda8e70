"""A real local Kubernetes control plane as plain processes, without Docker.

etcd, kube-apiserver, kube-controller-manager (garbage collector and namespace
controllers only), kube-scheduler and kwok (simulated nodes and kubelet), all on
loopback, on free ports, with their own PKI and RBAC authorization. With
`--gang scheduler-plugins`, a second scheduler with scheduler-plugins' Coscheduling
plugin and its PodGroup CRD (gang.py); `--volcano-crd` installs the Volcano PodGroup
CRD, which tests may also install and remove at run time (crds.py).

    hack/cluster.sh up|down|status|restart|compact [--nodes N] [--node-cpu 8] ...
    python -m hack.cluster ...            (the same, from the repository root)

`up` is idempotent: a cluster that is already running is reused. `down` stops exactly
the processes `up` started (by PID, recorded in state.json) and removes the state.
The cluster directory defaults to <repo>/.cluster (TFJOB_CLUSTER_DIR overrides it);
it holds kubeconfig, pki/, logs/ and state.json.

Tests and tools import what they need from here: the package is the library, and
cli.py the command line over it.
"""

import sys

from hack.cluster import gang, node
from hack.cluster.api import Api
from hack.cluster.crds import install_volcano_crd, remove_volcano_crd
from hack.cluster.host import REPO, cluster_dir, free_port, listening_ports, pid_alive
from hack.cluster.state import load_state, status_report

__all__ = [
    "REPO",
    "Api",
    "cluster_dir",
    "command",
    "free_port",
    "gang",
    "install_volcano_crd",
    "listening_ports",
    "load_state",
    "node",
    "pid_alive",
    "remove_volcano_crd",
    "status_report",
]


def command(*args: str) -> list[str]:
    """The command line for `python -m hack.cluster ARGS`; run it with cwd=REPO."""
    return [sys.executable, "-m", "hack.cluster", *args]
