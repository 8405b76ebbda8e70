"""The components: the Go-built binaries, each one's command line, starting a
process and the kwok nodes."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path
from typing import Any

from hack.cluster import gang, node
from hack.cluster.host import REPO

#: In start order; `down` stops them in reverse. The gang scheduler and its PodGroup
#: controller run only in a cluster started with `--gang scheduler-plugins` (see
#: cluster_components).
COMPONENTS = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    gang.COMPONENT,
    gang.CONTROLLER,
    "kwok",
    *node.COMPONENTS,
]
#: Each component's entries in state["ports"].
COMPONENT_PORTS = {
    "etcd": ["etcd", "etcd_peer"],
    "kube-apiserver": ["apiserver"],
    "kube-controller-manager": ["kcm"],
    "kube-scheduler": ["scheduler"],
    gang.COMPONENT: ["scheduler_plugins"],
    gang.CONTROLLER: ["scheduler_plugins_controller"],
}
#: Where each component that `up` waits for answers /healthz (the others: https).
HEALTH_SCHEME = {gang.CONTROLLER: "http"}
#: state's key for the PodGroup controller's binary. A gang cluster started before the
#: controller was part of it has none, and gets the controller at its next `up`.
CONTROLLER_BIN = "scheduler_plugins_controller_bin"


def cluster_components(state: dict[str, Any]) -> list[str]:
    """The components of the cluster that `state` describes, in start order."""
    return [
        c
        for c in COMPONENTS
        if (c != gang.COMPONENT or state.get("gang") == gang.COMPONENT)
        and (c != gang.CONTROLLER or CONTROLLER_BIN in state)
        and (c not in node.COMPONENTS or "real_node" in state)
    ]


def build_binaries(with_gang: bool = False) -> tuple[Path, Path | None, Path | None]:
    """The bin directory, and the gang scheduler's and its PodGroup controller's
    binaries when asked for."""
    out = subprocess.run(
        ["bash", str(REPO / "hack" / "build-binaries.sh")]
        + (["--scheduler-plugins"] if with_gang else []),
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    lines = out.stdout.strip().splitlines()
    extra = dict(ln.split("=", 1) for ln in lines[:-1] if "=" in ln)
    sp, ctrl = extra.get("scheduler-plugins"), extra.get("scheduler-plugins-controller")
    return Path(lines[-1]), Path(sp) if sp else None, Path(ctrl) if ctrl else None


def kwok_stage_files(bins: Path) -> list[Path]:
    """kwok's own fast node/pod stages (copied beside the binaries by
    build-binaries.sh), our exit-code stage, and our deletion stages in place of kwok's
    pod-delete (which ignores finalizers)."""
    stages = bins.parent / "stages"
    files = [
        stages / "node-initialize.yaml",
        stages / "pod-ready.yaml",
        REPO / "hack/kwok-exit-stage.yaml",
        REPO / "hack/kwok-delete-stages.yaml",
    ]
    for f in files:
        if not f.exists():
            raise SystemExit(f"missing kwok stage file {f}; run hack/build-binaries.sh")
    return files


def start(d: Path, name: str, argv: list[str], env: dict[str, str] | None = None) -> int:
    logs = d / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    out = open(logs / f"{name}.log", "ab")
    proc = subprocess.Popen(
        argv,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # survives the `up` command; `down` kills it by PID
        cwd=str(d),
        env=env,
    )
    out.close()
    return proc.pid


#: A profile's PodTopologySpread without its default constraints. By default the
#: scheduler spreads every pod over zones and hosts by the Services selecting it, and
#: finds those by looking through every Service of the pod's namespace for each pod it
#: places: with 40,000 Services in one namespace (5,000 jobs of 8) it placed 10 pods a
#: second on a full core, and every controller's benchmark measured the scheduler. Pods
#: that ask for spreading (topologySpreadConstraints) still get it; the nodes here are
#: in no zone, and resource scoring still spreads pods over them.
NO_DEFAULT_SPREAD = (
    "  pluginConfig:\n"
    "  - name: PodTopologySpread\n"
    "    args: {defaultingType: List, defaultConstraints: []}\n"
)


def _scheduler_argv(
    binary: Path, config: Path, kubeconfig: str, port: int, *extra: str
) -> list[str]:
    return [
        str(binary),
        f"--config={config}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        "--v=1",
        *extra,
    ]


def component_argv(
    name: str, d: Path, state: dict[str, Any], opts: argparse.Namespace
) -> list[str]:
    """`name`'s command line in the cluster of `state` (its bin_dir, ports, gang)."""
    bins = Path(state["bin_dir"])
    ports: dict[str, int] = state["ports"]
    pki = d / "pki"
    kubeconfig = str(d / "kubeconfig")
    if name == "etcd":
        return [
            str(bins / "etcd"),
            "--name=node0",
            f"--data-dir={d / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{ports['etcd']}",
            f"--advertise-client-urls=http://127.0.0.1:{ports['etcd']}",
            f"--listen-peer-urls=http://127.0.0.1:{ports['etcd_peer']}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{ports['etcd_peer']}",
            f"--initial-cluster=node0=http://127.0.0.1:{ports['etcd_peer']}",
            "--unsafe-no-fsync=true",
            "--quota-backend-bytes=8589934592",
            "--log-level=warn",
        ]
    if name == "kube-apiserver":
        argv = [
            str(bins / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
            # every address, as kube-apiserver's default: pods on the real node reach it
            # at the host's address (a controller deployed in the cluster); clients here
            # keep using 127.0.0.1
            "--bind-address=0.0.0.0",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports['apiserver']}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            # No node-lifecycle controller runs to lift the not-ready taint that
            # TaintNodesByCondition adds. ServiceAccount admission stays on, as on any
            # real cluster: pods get their namespace's `default` ServiceAccount and its
            # projected token, which the training-progress reports authenticate with.
            "--disable-admission-plugins=TaintNodesByCondition",
            # As on hardened clusters (OpenShift and others): setting blockOwnerDeletion
            # on a child needs update on the owner's finalizers subresource.
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
            # A loopback advertise address fails the kubernetes Endpoints validation.
            "--endpoint-reconciler-type=none",
            f"--cert-dir={d / 'apiserver-certs'}",
            "--max-requests-inflight=0",
            "--max-mutating-requests-inflight=0",
            "--enable-priority-and-fairness=false",
            # kubelet's address for logs and exec: a real node's name does not resolve
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--v=1",
        ]
        if opts.audit:
            argv += [
                f"--audit-policy-file={REPO / 'hack' / 'audit-policy.yaml'}",
                f"--audit-log-path={d / 'logs' / 'audit.log'}",
                "--audit-log-format=json",
                "--audit-log-mode=batch",
                # never rotated (0 means lumberjack's 100 MB): the benchmark reads it from
                # byte offsets, and a full compare run writes more than 100 MB
                "--audit-log-maxsize=1000000",
            ]
        return argv
    if name == "kube-controller-manager":
        return [
            str(bins / "kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--controllers=garbage-collector-controller,namespace-controller"
            # the token machinery of a real cluster: every namespace's `default`
            # ServiceAccount, its legacy token Secrets, and the kube-root-ca.crt
            # ConfigMap that each pod's projected service-account volume reads
            ",serviceaccount-controller,serviceaccount-token-controller"
            ",root-ca-certificate-publisher-controller"
            # cluster DNS on a real node answers from EndpointSlices; and what runs there
            # may be a Deployment (the controller deployed in the cluster, its Helm
            # chart's hook a Job)
            + (
                ",endpointslice-controller,deployment-controller,replicaset-controller"
                ",job-controller"
                if "real_node" in state
                else ""
            ),
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['kcm']}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            "--concurrent-gc-syncs=40",
            "--kube-api-qps=1000",
            "--kube-api-burst=2000",
            "--v=1",
        ]
    if name == "kube-scheduler":
        sched = d / "scheduler.yaml"
        sched.write_text(
            "apiVersion: kubescheduler.config.k8s.io/v1\n"
            "kind: KubeSchedulerConfiguration\n"
            f"clientConnection: {{kubeconfig: {kubeconfig!r}, qps: 1000, burst: 2000}}\n"
            "leaderElection: {leaderElect: false}\n"
            "profiles:\n"
            "- schedulerName: default-scheduler\n"
            f"{NO_DEFAULT_SPREAD}"
            # Lets pods aimed at Volcano bind here too (no gang semantics).
            "- schedulerName: volcano\n"
            f"{NO_DEFAULT_SPREAD}"
        )
        return _scheduler_argv(bins / "kube-scheduler", sched, kubeconfig, ports["scheduler"])
    if name == gang.COMPONENT:
        sched = d / "scheduler-plugins.yaml"
        sched.write_text(gang.scheduler_config(kubeconfig))
        binary = Path(state["scheduler_plugins_bin"])
        return _scheduler_argv(
            binary,
            sched,
            kubeconfig,
            ports["scheduler_plugins"],
            f"--pod-max-in-unschedulable-pods-duration={gang.UNSCHEDULABLE_RETRY}",
        )
    if name == gang.CONTROLLER:
        binary = Path(state[CONTROLLER_BIN])
        return gang.controller_argv(binary, kubeconfig, ports["scheduler_plugins_controller"])
    if name == "kwok":
        argv = [
            str(bins / "kwok"),
            f"--kubeconfig={kubeconfig}",
            # only its own nodes: a real node (node.py) runs its pods for real
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--cidr={getattr(opts, 'kwok_cidr', '10.244.0.0/16')}",
            "--node-lease-duration-seconds=0",
        ]
        for f in kwok_stage_files(bins):
            argv.append(f"--config={f}")
        return argv
    if name in node.COMPONENTS:
        return node.argv(name, d, state)
    raise ValueError(name)


def node_manifest(i: int, opts: argparse.Namespace) -> dict[str, Any]:
    res = {
        "cpu": str(opts.node_cpu),
        "memory": opts.node_memory,
        "nvidia.com/gpu": str(opts.node_gpu),
        "pods": str(opts.node_pods),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"kwok-node-{i}",
            "labels": {"type": "kwok", "kubernetes.io/hostname": f"kwok-node-{i}"},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "status": {"allocatable": res, "capacity": res},
    }
