"""Gang scheduling in the local cluster: scheduler-plugins' Coscheduling plugin, run as
a second scheduler process beside kube-scheduler (`up --gang scheduler-plugins`).

Pods that set `schedulerName: scheduler-plugins-scheduler` and carry the label
`scheduling.x-k8s.io/pod-group: <PodGroup name>` are bound all together or not at all:
Permit holds a group's pods until `minMember` of them fit, for at most
PERMIT_WAITING_TIME_SECONDS, then lets them all bind or rejects them all.
"""

from __future__ import annotations

from pathlib import Path

GANG_SCHEDULERS = ("scheduler-plugins",)
#: The component name (logs/scheduler-plugins.log, `restart scheduler-plugins`).
COMPONENT = "scheduler-plugins"
#: The profile's schedulerName, which pods of a gang set.
SCHEDULER_NAME = "scheduler-plugins-scheduler"
#: How long Permit holds a group's assumed pods waiting for the rest (upstream: 60 s).
PERMIT_WAITING_TIME_SECONDS = 5
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
POD_GROUP_CRD = "podgroups.scheduling.x-k8s.io"


def pod_group_crd_file(binary: Path) -> Path:
    """The module's PodGroup CRD, which build-binaries.sh keeps beside the binary."""
    return binary.parent.parent / "crds" / "scheduling.x-k8s.io_podgroups.yaml"


def scheduler_config(kubeconfig: str) -> str:
    """One profile, Coscheduling at every extension point it has (multiPoint) and as
    the queue sort (which orders a group's pods together)."""
    return (
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        f"clientConnection: {{kubeconfig: {kubeconfig!r}, qps: 1000, burst: 2000}}\n"
        "leaderElection: {leaderElect: false}\n"
        "profiles:\n"
        f"- schedulerName: {SCHEDULER_NAME}\n"
        "  plugins:\n"
        "    multiPoint: {enabled: [{name: Coscheduling}]}\n"
        "    queueSort: {enabled: [{name: Coscheduling}], disabled: [{name: '*'}]}\n"
        "  pluginConfig:\n"
        "  - name: Coscheduling\n"
        f"    args: {{permitWaitingTimeSeconds: {PERMIT_WAITING_TIME_SECONDS}}}\n"
    )
