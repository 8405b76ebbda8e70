"""Gang scheduling in the local cluster: scheduler-plugins' Coscheduling plugin, run as
a second scheduler process beside kube-scheduler (`up --gang scheduler-plugins`), and
scheduler-plugins' PodGroup controller beside it, as a full install runs them.

Pods that set `schedulerName: scheduler-plugins-scheduler` and carry the label
`scheduling.x-k8s.io/pod-group: <PodGroup name>` are bound all together or not at all:
Permit holds a group's pods until `minMember` of them fit, for at most
PERMIT_WAITING_TIME_SECONDS, then lets them all bind or rejects them all.

The controller keeps each PodGroup's status (phase; running, succeeded and failed
counts) as its pods and its spec change. Coscheduling tries a gang it turned down again
only when a PodGroup is added or updated or a pod is added (its EventsToRegister), not
when a node comes or room frees up. The controller's status writes are such updates:
when a group's minMember is lowered, when another group's pods finish. Without them
such a gang could wait for the scheduler's periodic flush of unschedulable pods.

Coscheduling reads a PodGroup from a cache of its own, not from the informer whose event
woke the pod, so the retry an update starts can see the group as it was; when the
controller's status write follows too soon to help, the pod stays unschedulable until
the scheduler's flush (one CI run saw a job wait past its test's minute after minMember
was lowered). The flush runs every 30 s for pods unschedulable longer than
UNSCHEDULABLE_RETRY: upstream's default is 5 minutes, which no test should wait, so the
local gang scheduler sets 20 s. A gang that cannot fit is only refused again.
"""

from __future__ import annotations

from pathlib import Path

GANG_SCHEDULERS = ("scheduler-plugins",)
#: The component name (logs/scheduler-plugins.log, `restart scheduler-plugins`).
COMPONENT = "scheduler-plugins"
#: scheduler-plugins' PodGroup controller (logs/scheduler-plugins-controller.log,
#: `restart scheduler-plugins-controller`), built beside the scheduler.
CONTROLLER = "scheduler-plugins-controller"
#: What `up --gang scheduler-plugins` runs, in start order.
COMPONENTS = (COMPONENT, CONTROLLER)
#: The profile's schedulerName, which pods of a gang set.
SCHEDULER_NAME = "scheduler-plugins-scheduler"
#: How long Permit holds a group's assumed pods waiting for the rest (upstream: 60 s).
PERMIT_WAITING_TIME_SECONDS = 5
#: --pod-max-in-unschedulable-pods-duration of the gang scheduler (see the module doc).
UNSCHEDULABLE_RETRY = "20s"
#: The most a pod whose retry read a stale PodGroup waits for the flush: the retry
#: duration plus the flush's 30 s period, with a margin.
STALE_RETRY_BOUND_SECONDS = 20 + 30 + 10
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


def controller_argv(binary: Path, kubeconfig: str, port: int) -> list[str]:
    """The PodGroup controller (hack/scheduler-plugins/controller/): no leader election
    (one replica), health on `port` over plain HTTP, no metrics server. Upstream's
    client limits (5/10) would throttle a benchmark's thousand PodGroups; the local
    cluster's other components get 1000/2000 too."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--health-probe-bind-address=127.0.0.1:{port}",
        "--metrics-bind-address=0",
        "--kube-api-qps=1000",
        "--kube-api-burst=2000",
        "--v=1",
    ]
