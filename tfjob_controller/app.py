"""tfjob-controller's entry point: the composition root.

This is where the generic machinery (controller/) meets the TFJob logic (reconcile/):
neither of those imports this package, so every arrow points down (hack/check_layers.py
enforces it). It parses flags, builds the API client, three informers (TFJobs; Pods and
Services carrying our operator label only, so the cache never holds the rest of the
cluster), the expectations, the event recorder and the reconciler, and hands them to the
Manager.

The pod and service caches hold slim objects (``reconcile.sync.slim``: only the fields the
TFJob logic reads, a fraction of a full pod's memory) and are indexed by controller UID
only, the one index the reconciler queries.

The event handlers' policy (owner kinds, expectation keys, how urgently to enqueue) is
reconcile.sync.handlers. Everything is built in dependency order and injected at
construction: queue → background work → reconciler → controller.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from dataclasses import replace
from typing import Any

import anyio
import structlog

from controller.cache.informer import Informer
from controller.cache.store import (
    IndexFunc,
    index_by_controller_name,
    index_by_controller_uid,
    index_by_pod_ip,
    resource_version_of,
)
from controller.cache.transforms import Transform, chain_transforms, strip_managed_fields
from controller.client.api import ClientSettings, KubeApi
from controller.client.kube import EVENTS, LEASES, PODS, SERVICES, Resource, ResourceClient, served
from controller.clock import SystemClock
from controller.observability import heap
from controller.observability.addresses import Sharing, sharing
from controller.observability.logging import add_logging_flags, configure_logging
from controller.observability.looplag import LoopLagMonitor
from controller.observability.metrics import Metrics
from controller.observability.server import MAX_CONNECTIONS as PROBE_CONNECTIONS
from controller.observability.server import add_server_flags, probe_address_problem, serve_probes
from controller.queue.workqueue import WorkQueue
from controller.runtime.background import Background
from controller.runtime.controller import Controller
from controller.runtime.descriptors import connection_caps, raise_soft_limit
from controller.runtime.eventloop import loop_factory
from controller.runtime.events import EventRecorder
from controller.runtime.expectations import ControllerExpectations
from controller.runtime.leader import LeaseElector, default_identity
from controller.runtime.manager import Manager
from controller.runtime.pacer import Pacer
from controller.serving.limits import Budget
from controller.serving.reports import MAX_CONNECTIONS as REPORT_CONNECTIONS
from controller.types import (
    CONTROLLER_NAME_INDEX,
    CONTROLLER_UID_INDEX,
    POD_IP_INDEX,
    Clock,
    EventWriter,
)
from reconcile.api.labels import DEFAULT_OPERATOR_NAME, OPERATOR_NAME_LABEL
from reconcile.api.names import GROUP, KIND, PLURAL, VERSION
from reconcile.plan import PlanConfig
from reconcile.policy import conditions as cond
from reconcile.policy.collateral import DEFAULT_WINDOW
from reconcile.policy.gang import KIND as PODGROUP_KIND
from reconcile.policy.gang import PLURAL as PODGROUP_PLURAL
from reconcile.policy.gang import Gang, gang_from_flag
from reconcile.policy.restart import BackoffPolicy
from reconcile.sync.handlers import job_handler, pod_handler, podgroup_handler, service_handler
from reconcile.sync.metrics import JobMetrics
from reconcile.sync.pacing import MAX_STATUS_PACE, STATUS_PACE_SECONDS
from reconcile.sync.slim import slim_node, slim_pod, slim_service
from reconcile.sync.tfjob import (
    DEFAULT_FAILED_CREATE_GRACE,
    UNSATISFIED_RECHECK_SECONDS,
    Caches,
    TFJobReconciler,
    Writers,
)
from tfjob_controller.reporting import (
    add_progress_flags,
    check_progress_flags,
    progress_endpoint,
    reporting_of,
)
from tfjob_controller.secure_metrics import metrics_protection

log = structlog.get_logger("tfjob-controller")

#: Warning events of failed child writes (reconcile.sync.child_writes)
WATCHED_WARNINGS = (
    "FailedCreatePod",
    "FailedCreateService",
    "FailedDeletePod",
    "FailedDeleteService",
)

TFJOBS = Resource(GROUP, VERSION, PLURAL, kind=KIND)
NODES = Resource("", "v1", "nodes", namespaced=False, kind="Node")
PRIORITY_CLASSES = Resource(
    "scheduling.k8s.io", "v1", "priorityclasses", namespaced=False, kind="PriorityClass"
)
CONTROLLER_NAME = "tfjob-controller"

#: Cache transforms. TFJobs are kept whole (the spec is the job); pods and services
#: only with the fields the reconciler reads.
JOB_TRANSFORM: Transform = strip_managed_fields
POD_TRANSFORM: Transform = chain_transforms(strip_managed_fields, slim_pod)
SERVICE_TRANSFORM: Transform = chain_transforms(strip_managed_fields, slim_service)
#: Children are looked up by their controller's UID, and by its name when the job is
#: gone or was recreated (reconcile.sync.tfjob, reconcile.policy.tracking).
CHILD_INDEXERS: dict[str, IndexFunc] = {
    CONTROLLER_UID_INDEX: index_by_controller_uid,
    CONTROLLER_NAME_INDEX: index_by_controller_name,
}


def add_cluster_flags(p: argparse.ArgumentParser) -> None:
    """Which cluster, and as whom: the controller's and its subcommands'."""
    p.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG") or None,
        help="kubeconfig path (default: $KUBECONFIG, then in-cluster config)",
    )
    p.add_argument("--context", default=None, help="kubeconfig context")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="tfjob-controller",
        description="Kubernetes controller for TensorFlow training jobs (TFJob, kubeflow.org/v1).",
    )
    add_cluster_flags(p)
    p.add_argument(
        "--namespace",
        default=os.environ.get("KUBEFLOW_NAMESPACE") or None,
        help="watch only this namespace (default: all)",
    )
    p.add_argument(
        "--controller-threads", type=int, default=4, help="concurrent reconciles (default 4)"
    )
    p.add_argument(
        "--kube-api-qps",
        type=float,
        default=20.0,
        help="client-side request rate limit; <= 0 disables it (default 20)",
    )
    p.add_argument("--kube-api-burst", type=int, default=30, help="client-side burst (default 30)")
    p.add_argument(
        "--kube-api-tick",
        type=float,
        default=0.1,
        help="seconds: requests waiting for the client-side limit (creates, deletes)"
        " go out on this shared tick, several per wake-up, at the same rate; status writes"
        " and watches never wait for it; events and tracking-finalizer removals go out"
        " once a second (or on the tick, if longer). 0 releases each the moment its token"
        " is due (default 0.1)",
    )
    p.add_argument(
        "--status-pace",
        type=float,
        default=STATUS_PACE_SECONDS,
        help="seconds: after a job's status write, a write that only reports progress"
        " (replica counts, the Running condition) waits this long; an outcome never waits."
        " Longer costs fewer writes and less CPU, with a staler count"
        f" (default {STATUS_PACE_SECONDS:g})",
    )
    p.add_argument(
        "--leader-elect",
        action="store_true",
        default=False,
        help="use a Lease so only one replica reconciles",
    )
    p.add_argument(
        "--leader-election-namespace",
        default=None,
        help="namespace of the Lease (default: the pod's namespace, else default)",
    )
    p.add_argument("--leader-election-id", default="tfjob-controller.kubeflow.org")
    p.add_argument(
        "--leader-election-identity",
        default=None,
        help="this replica's name in the Lease, also appended to the User-Agent so the"
        " apiserver's audit log tells the replicas apart (default: hostname_<random>)",
    )
    p.add_argument(
        "--cluster-domain",
        default=os.environ.get("CUSTOM_CLUSTER_DOMAIN") or None,
        help="suffix for TF_CONFIG addresses (default: $CUSTOM_CLUSTER_DOMAIN)",
    )
    p.add_argument(
        "--restart-backoff-base",
        type=float,
        default=BackoffPolicy.base_seconds,
        help="seconds before the first replacement of a failed pod (default %(default)s)",
    )
    p.add_argument(
        "--restart-backoff-max",
        type=float,
        default=BackoffPolicy.max_seconds,
        help="cap of the replacement backoff in seconds (default %(default)s)",
    )
    p.add_argument(
        "--collateral-window",
        type=float,
        default=DEFAULT_WINDOW.total_seconds(),
        help="seconds after a peer's retryable end in which a permanent end of a"
        " whole-gang-restart job is the restart's doing, not the job's failure; a"
        " permanent end is held that long for such a peer end to arrive (default"
        " %(default)s)",
    )
    p.add_argument(
        "--event-loop",
        choices=["auto", "uvloop", "asyncio"],
        default="auto",
        help="the event loop: the standard library's asyncio loop, whose waits the"
        " wake gate can shape, or uvloop (less CPU per event, never gated). auto"
        " (default): asyncio when the wake gate is on, uvloop otherwise",
    )
    p.add_argument(
        "--wake-gate",
        type=float,
        default=None,
        help="seconds: while traffic flows, the asyncio loop wakes at most once per gate"
        " and reads what arrived meanwhile together; what arrives waits up to that long."
        " 0: woken by each arrival. Default: 0.05 under a client-side rate limit"
        " (--kube-api-qps > 0), where the process idles between ticks, and 0 without one",
    )
    p.add_argument(
        "--loop-lag-interval",
        type=float,
        default=0.1,
        help="seconds between samples of the event loop's lag (event_loop_lag_seconds;"
        " default 0.1)",
    )
    p.add_argument(
        "--failed-create-grace",
        type=float,
        default=DEFAULT_FAILED_CREATE_GRACE,
        help="seconds a job's pod or service creates may keep failing with a permanent"
        " error (400, 403, 404, 422) before the job fails"
        f" (default {DEFAULT_FAILED_CREATE_GRACE:g})",
    )
    p.add_argument(
        "--gang-scheduler-name",
        default="",
        help="gang scheduling with PodGroups: empty (default) is off; 'volcano' uses"
        " Volcano's (scheduling.volcano.sh/v1beta1); any other value uses scheduler-plugins'"
        " (scheduling.x-k8s.io/v1alpha1, coscheduling) with that value as the pods'"
        " schedulerName",
    )
    p.add_argument(
        "--token-review-qps",
        type=float,
        default=DEFAULT_REVIEW_QPS,
        help="TokenReviews and SubjectAccessReviews a second the process may ask for"
        " callers whose verdict is not cached, /metrics and progress reports together;"
        " past it a caller is answered 503 with Retry-After. 0: no limit"
        " (default %(default)s)",
    )
    p.add_argument(
        "--token-review-burst",
        type=int,
        default=DEFAULT_REVIEW_BURST,
        help="(default %(default)s): every pod of a large job reviewed at its start",
    )
    add_server_flags(p)
    add_progress_flags(p)
    add_logging_flags(p)
    args = p.parse_args(argv)
    if not 0 <= args.status_pace <= MAX_STATUS_PACE:
        p.error(f"--status-pace must be between 0 and {MAX_STATUS_PACE:g} seconds")
    problem = check_progress_flags(args)
    if problem:
        p.error(problem)
    if args.wake_gate is not None and not 0 <= args.wake_gate <= MAX_WAKE_GATE:
        p.error(f"--wake-gate must be between 0 and {MAX_WAKE_GATE:g} seconds")
    if args.wake_gate and args.event_loop == "uvloop":
        p.error("--wake-gate needs the asyncio event loop: uvloop cannot be gated")
    args.wake_gate, args.event_loop = event_loop_choice(
        args.event_loop, args.wake_gate, args.kube_api_qps
    )
    problem = address_problem(args)
    if problem:
        p.error(problem)
    if args.token_review_qps < 0 or args.token_review_burst < 1:
        p.error("--token-review-qps must be 0 or more and --token-review-burst at least 1")
    return args


#: reviews a second for callers not cached (--token-review-qps): a stranger's fresh
#: tokens cost the apiserver at most this; a 1,600-pod job's first reports take the
#: burst, then 1,600 / 20 = 80 s at worst, each pod told when to come back
DEFAULT_REVIEW_QPS = 20.0
DEFAULT_REVIEW_BURST = 200


def address_problem(args: argparse.Namespace) -> str | None:
    """Why the servers' bind addresses cannot all be bound as given, or None: compared
    as the sockets they would be, not as strings (controller.observability.addresses)."""
    problem = probe_address_problem(
        args.metrics_bind_address, args.health_probe_bind_address, secure=args.metrics_secure
    )
    if problem or not args.progress_url:
        return problem
    for flag, other in (
        ("--metrics-bind-address", args.metrics_bind_address),
        ("--health-probe-bind-address", args.health_probe_bind_address),
    ):
        try:
            shared = sharing(args.progress_bind_address, other)
        except ValueError as e:
            return str(e)
        if shared is not Sharing.APART:
            return (
                f"--progress-bind-address {args.progress_bind_address} would share a socket"
                f" with {flag} {other}: the progress endpoint needs a port of its own"
            )
    return None


#: The wake gate under a client-side rate limit (--wake-gate), and its largest value: a
#: gate delays what arrives while traffic flows, and the status of a pod's start is
#: meant to be written within 0.2 s.
WAKE_GATE_UNDER_QPS = 0.05
MAX_WAKE_GATE = 1.0


def event_loop_choice(kind: str, gate: float | None, qps: float) -> tuple[float, str]:
    """The wake gate and the loop (--wake-gate, --event-loop). Under a client-side rate
    limit the process idles between the client's ticks and each arrival would wake it
    (controller.runtime.eventloop); without one it is busy whenever there is work, and
    uvloop's cheaper events count more than fewer wake-ups."""
    if gate is None:
        gate = WAKE_GATE_UNDER_QPS if qps > 0 and kind != "uvloop" else 0.0
    if kind == "auto":
        kind = "asyncio" if gate > 0 else "uvloop"
    return gate, kind


def podgroups_resource(gang: Gang) -> Resource:
    return Resource(gang.group, gang.version, PODGROUP_PLURAL, kind=PODGROUP_KIND)


#: The Lease's own client: no client-side rate limit (it sends two requests per retry
#: period) and a small pool of its own, so workload traffic can never delay a renewal.
LEASE_CLIENT_SETTINGS = ClientSettings(
    qps=0, pool_size=2, stream_pool_size=1, user_agent="tfjob-controller-leader-election"
)


#: Tokens of the status budget's burst kept for urgent status writes (Budgets).
STATUS_HIGH_RESERVE = 5
#: Writes nobody waits for (events, tracking-finalizer removals) that wait for their
#: budget go out once a second (Budgets), at 20 QPS twenty together, unless the client's
#: tick is off or longer.
UNAWAITED_TICK = 1.0


class Budgets:
    """The client's siblings (controller.client.api.KubeApi.sibling), one per kind of traffic
    that upstream sends through a REST client of its own, and one for the tracking
    finalizer's removals, which upstream does not send; pod and service writes use the
    client itself. With --kube-api-qps Q the controller may send up to 5Q requests a
    second in all (6Q with gang scheduling), plus the Lease's two per retry period."""

    def __init__(self, api: KubeApi) -> None:
        # Status writes, which users and the next pass wait for, and the informers'
        # lists and watches go out the moment their token is due; the rest wait for
        # the client's tick (--kube-api-tick).
        # A burst of new jobs queues a first status (Created, not urgent) for each at the
        # budget's rate; a reserve keeps a token for the urgent writes of jobs whose pods
        # already run, so theirs go at once rather than on the next token.
        reserve = min(STATUS_HIGH_RESERVE, api.settings.burst // 4)
        self.jobs = api.sibling(tick=0.0, high_reserve=reserve)  # TFJob status, TTL deletes
        self.podgroups = api.sibling()  # gang scheduling's PodGroup writes
        # Events and the tracking finalizer's removals (a finished job's pods deleted, a
        # job deleted): nobody waits for an event, and only a deletion for a removal, so
        # when many wait they go out a second's worth at a time, and their answers (and
        # the deletions the removals let through) are read at a few wake-ups instead of
        # one or two each. The removals have a budget of their own: creates never wait
        # behind them.
        tick = api.settings.tick
        slow = max(tick, UNAWAITED_TICK) if tick > 0 else 0.0
        self.events = api.sibling(tick=slow)
        self.releases = api.sibling(tick=slow)
        self.watches = api.sibling(tick=0.0)  # every informer's lists and watches
        self._api = api

    def writers(self, podgroups: Resource | None) -> Writers:
        """The reconciler's writers, each on its budget (PodGroups with gang scheduling)."""
        return Writers(
            jobs=ResourceClient(self.jobs, TFJOBS),
            # a child's create is only checked for success: its answer is not decoded
            pods=ResourceClient(self._api, PODS, answers=False),
            services=ResourceClient(self._api, SERVICES, answers=False),
            podgroups=ResourceClient(self.podgroups, podgroups) if podgroups else None,
            releases=ResourceClient(self.releases, PODS),
        )

    def event_writer(self) -> ResourceClient:
        """Where the events go, on their budget; the recorder only checks that each was
        made, so their answers are not decoded."""
        return ResourceClient(self.events, EVENTS, answers=False)


def event_recorder(writer: EventWriter, clock: Clock, metrics: Metrics) -> EventRecorder:
    """The controller's events: counted in the metrics, and a full buffer gives up the
    per-child ones first (reconcile.policy.conditions.ROUTINE_REASONS)."""
    return EventRecorder(
        writer,
        component=CONTROLLER_NAME,
        clock=clock,
        on_drop=metrics.event_dropped,
        on_event=metrics.event_recorded,
        routine=cond.ROUTINE_REASONS,
    )


def background_limit(settings: ClientSettings) -> int:
    """How many handed-off writes (creates) may be in flight at once: a fifth of the
    connection pool is left to the rest, so at unlimited QPS a status write or an event
    finds a connection free instead of queueing behind the creates, and the apiserver has
    fewer of them in hand when it comes. (`hack/bench --scaling 200 --qps unlimited` on
    one cluster: pod Running -> status p99 489-607 ms with 64 in flight, 293-363 with 40;
    creation 7.5-9.3 s and 8.3-9.0 s.)"""
    return max(1, settings.pool_size - max(2, settings.pool_size // 5))


def with_identity(settings: ClientSettings, identity: str) -> ClientSettings:
    """The settings with ``/<identity>`` after the user agent: every request then names
    its replica in the audit log, and the agent still starts with ``tfjob-controller``."""
    return replace(settings, user_agent=f"{settings.user_agent}/{identity}")


#: The fewest connections a client under a rate limit keeps (pool_size_for).
MIN_LIMITED_POOL = 8


def pool_size_for(qps: float, burst: int) -> int:
    """Connections for the client's requests (watches have their own). Without a rate
    limit, ClientSettings' default. Under one, the burst: only a burst goes out at once,
    so more connections would only be more TLS handshakes (about 2 ms of CPU and 0.3 MB
    each; at 20/30 the first second opened 45). Fewer make the burst wait for
    connections: with a third of it, a job's first status write queued behind the other
    jobs' first ones for 0.3 s (`hack/bench --scaling 60 --qps 20/30`)."""
    default = ClientSettings().pool_size
    if qps <= 0:
        return default
    return min(default, max(MIN_LIMITED_POOL, burst))


def client_settings(args: argparse.Namespace) -> tuple[str, ClientSettings]:
    """The replica's identity (the flag's, else one of its own) and the settings of its
    API client, which name it in every request."""
    identity = args.leader_election_identity or default_identity()
    settings = ClientSettings(
        qps=args.kube_api_qps,
        burst=args.kube_api_burst,
        tick=args.kube_api_tick,
        pool_size=pool_size_for(args.kube_api_qps, args.kube_api_burst),
    )
    return identity, with_identity(settings, identity)


async def run(args: argparse.Namespace) -> int:
    clock = SystemClock()
    identity, settings = client_settings(args)
    api = await KubeApi.from_kubeconfig(args.kubeconfig, args.context, settings)
    gang = gang_from_flag(args.gang_scheduler_name)
    async with api, contextlib.AsyncExitStack() as stack:
        if gang is not None and not await served(api, podgroups_resource(gang)):
            log.error(
                "the PodGroup CRD is not served: install it, or run without --gang-scheduler-name",
                crd=gang.crd_name,
                version=gang.version,
                gang_scheduler_name=args.gang_scheduler_name,
            )
            return 1
        metrics = Metrics()
        job_metrics = JobMetrics(metrics.registry)
        # a stranger's made-up tokens cost the apiserver at most this, all ports together
        reviews = Budget(clock, rate=args.token_review_qps, burst=args.token_review_burst)
        metrics_tls, metrics_guard = metrics_protection(
            args, api, clock, args.leader_election_namespace or _pod_namespace(), reviews
        )
        nofile = raise_soft_limit()
        caps = connection_caps(
            nofile,
            {
                "health": PROBE_CONNECTIONS,
                "metrics": PROBE_CONNECTIONS,
                "progress": REPORT_CONNECTIONS if args.progress_url else 0,
            },
            first=("health",),
        )
        selector = f"{OPERATOR_NAME_LABEL}={DEFAULT_OPERATOR_NAME}"
        # One budget (qps/burst) per kind of traffic, as upstream has one token bucket per
        # REST client: pod and service writes (``api``), TFJob status writes and
        # deletions, PodGroup writes, events, and the informers' lists and watches. A
        # create never waits behind a status write or an event, nor they behind it.
        budgets = Budgets(api)

        def watched(resource: Resource, name: str, **kw: Any) -> Informer:
            """An informer of ``resource`` on the watches budget, for --namespace unless
            told otherwise."""
            options: dict[str, Any] = {"namespace": args.namespace, "clock": clock, **kw}
            return Informer(ResourceClient(budgets.watches, resource), name=name, **options)

        job_informer = watched(TFJOBS, "tfjobs", transform=JOB_TRANSFORM)
        children: dict[str, Any] = {"label_selector": selector, "indexers": CHILD_INDEXERS}
        pod_informer = watched(
            PODS,
            "pods",
            transform=POD_TRANSFORM,
            label_selector=selector,
            # the progress endpoint lets our pods' addresses before strangers'
            indexers={**CHILD_INDEXERS, POD_IP_INDEX: index_by_pod_ip},
        )
        service_informer = watched(SERVICES, "services", transform=SERVICE_TRANSFORM, **children)
        informers = [job_informer, pod_informer, service_informer]
        podgroup_informer = priority_informer = None
        if gang is not None:
            podgroup_informer = watched(
                podgroups_resource(gang), "podgroups", transform=strip_managed_fields
            )
            priority_informer = watched(  # cluster-scoped
                PRIORITY_CLASSES, "priorityclasses", transform=strip_managed_fields, namespace=None
            )
            informers += [podgroup_informer, priority_informer]
        node_informer = None
        if args.progress_url:
            # where a straggler may be moved to (reconcile.progress.moves); cluster-scoped
            node_informer = watched(NODES, "nodes", transform=slim_node, namespace=None)
            informers.append(node_informer)
        expectations = ControllerExpectations(clock)
        queue = WorkQueue[str](
            CONTROLLER_NAME, clock=clock, metrics=metrics.queue(CONTROLLER_NAME, clock)
        )
        background = Background(
            queue,
            limit=background_limit(settings),
            drained_recheck=UNSATISFIED_RECHECK_SECONDS,
        )
        elector: LeaseElector | None = None
        endpoint = await progress_endpoint(
            args,
            api=api,
            clock=clock,
            jobs=job_informer.store,
            pods=pod_informer.store,
            queue=queue,
            registry=metrics.registry,
            # reports count only at the leader: the others answer 503 (docs/progress.md)
            leading=lambda: elector is None or elector.leading,
            own_namespace=args.leader_election_namespace or _pod_namespace(),
            budget=reviews,
            max_connections=caps["progress"],
        )
        recorder = event_recorder(budgets.event_writer(), clock, metrics)
        # the failed writes an alert watches exist from the first scrape, so an
        # increase() sees their first one (config/prometheus/alerts.yaml)
        for reason in WATCHED_WARNINGS:
            metrics.events.labels(cond.WARNING, reason)
        reconciler = TFJobReconciler(
            caches=Caches(
                jobs=job_informer.store,
                pods=pod_informer.store,
                services=service_informer.store,
                podgroups=podgroup_informer.store if podgroup_informer else None,
                priorityclasses=priority_informer.store if priority_informer else None,
                nodes=node_informer.store if node_informer else None,
            ),
            writers=budgets.writers(podgroups_resource(gang) if gang is not None else None),
            expectations=expectations,
            events=recorder,
            clock=clock,
            spawner=background,
            pacer=Pacer(clock, args.status_pace),
            training_pacer=endpoint.training_pacer if endpoint else None,
            training_gate=endpoint.training_gate if endpoint else None,
            progress=endpoint.intake if endpoint else None,
            config=PlanConfig(
                cluster_domain=args.cluster_domain,
                backoff_base_seconds=args.restart_backoff_base,
                backoff_max_seconds=args.restart_backoff_max,
                gang=gang,
                collateral_window_seconds=args.collateral_window,
                reporting=reporting_of(args),
            ),
            metrics=job_metrics,
            failed_create_grace=args.failed_create_grace,
        )
        ctrl = Controller(
            CONTROLLER_NAME,
            reconciler,
            workers=args.controller_threads,
            clock=clock,
            metrics=metrics,
            queue=queue,
            background=background,
        )
        job_informer.add_handler(
            job_handler(expectations, queue, job_metrics, pace=args.status_pace)
        )
        pod_informer.add_handler(pod_handler(expectations, queue))
        service_informer.add_handler(service_handler(expectations, queue))
        if podgroup_informer is not None:
            podgroup_informer.add_handler(podgroup_handler(expectations, queue))
        if endpoint is not None:
            endpoint.events = recorder
            job_informer.add_handler(endpoint.namespace_handler())

        if args.leader_elect:
            # The lease has a client of its own (connections, no token bucket: two
            # requests per retry period), so a renewal never queues behind the workload's
            # creates, deletes and events.
            lease_api = KubeApi(api.configuration, with_identity(LEASE_CLIENT_SETTINGS, identity))
            stack.push_async_callback(lease_api.close)
            elector = LeaseElector(
                ResourceClient(lease_api, LEASES),
                namespace=args.leader_election_namespace or _pod_namespace(),
                name=args.leader_election_id,
                identity=identity,
                clock=clock,
                on_change=metrics.leader_status(args.leader_election_id),
            )
        manager: Manager

        def ready() -> bool:
            return manager.caches_synced

        def pending(key: str) -> dict[str, object]:
            """/debug/queue: the controller's view of the key, and which version of the
            TFJob its cache holds (so a caller that wrote the job can tell whether the
            controller has seen that write yet)."""
            job = job_informer.store.get_by_key(key)
            seen = resource_version_of(job) if job is not None else None
            return {**ctrl.describe(key), "cached_resource_version": seen}

        manager = Manager(
            on_synced=heap.settle,
            informers=informers,
            controllers=[ctrl],
            elector=elector,
            # events are written for the leader: only while leading, flushed before the
            # lease is released, dropped if it is lost
            leader_services=[recorder.run, *([endpoint.bundle.run] if endpoint else [])],
            before_release=recorder.flush,
            services=[
                LoopLagMonitor(metrics.loop_lag.observe, interval=args.loop_lag_interval).run,
                heap.HeapKeeper(metrics.gc_paused).run,
                serve_probes(
                    metrics=metrics,
                    metrics_address=args.metrics_bind_address,
                    health_address=args.health_probe_bind_address,
                    ready=ready,
                    # A lease that stopped renewing makes the process unhealthy.
                    healthy=elector.healthy if elector is not None else None,
                    debug=pending,
                    metrics_tls=metrics_tls,
                    metrics_guard=metrics_guard,
                    max_connections=caps["metrics"],
                    health_max_connections=caps["health"],
                ),
                *(endpoint.services if endpoint else []),
            ],
        )
        log.info(
            "starting",
            namespace=args.namespace or "(all)",
            workers=args.controller_threads,
            qps=args.kube_api_qps,
            burst=args.kube_api_burst,
            leader_elect=args.leader_elect,
            identity=identity,
            gang_scheduler=gang.scheduler_name if gang else None,
            event_loop=args.event_loop,
            wake_gate=args.wake_gate,
            descriptors=nofile,
            connection_caps=caps,
        )
        return await manager.run()


def _pod_namespace() -> str:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


def main(argv: list[str] | None = None) -> None:
    words = sys.argv[1:] if argv is None else argv
    if words[:1] == ["explain"]:
        # A subcommand that needs no cluster (tfjob_controller.explain).
        from tfjob_controller.explain import main as explain_main

        sys.exit(explain_main(words[1:], prog="tfjob-controller explain"))
    if words[:1] == ["release-finalizers"]:
        # A one-shot for uninstalls (tfjob_controller.release).
        from tfjob_controller.release import main as release_main

        sys.exit(release_main(words[1:]))
    args = parse_args(argv)
    configure_logging(args.log_format, args.log_level)
    factory = loop_factory(args.event_loop, args.wake_gate)
    options = {"loop_factory": factory} if factory is not None else {}
    sys.exit(anyio.run(run, args, backend="asyncio", backend_options=options))


if __name__ == "__main__":
    main()
