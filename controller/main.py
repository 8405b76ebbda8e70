"""tfjob-controller's entry point: the composition root.

This is the one module where the generic machinery (controller/) meets the TFJob logic
(reconcile/); hack/check_layers.py allows it and nothing else. It parses flags, builds
the API client, three informers (TFJobs; Pods and Services carrying our operator label
only, so the cache never holds the rest of the cluster), the expectations, the event
recorder and the reconciler, and hands them to the Manager.

The pod and service caches hold slim objects (``reconcile.slim``: only the fields the
TFJob logic reads, a fraction of a full pod's memory) and are indexed by controller UID
only, the one index the reconciler queries.

Event handlers only lower expectations and enqueue keys: never I/O, never mutation.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

import anyio
import structlog

from controller.api import ClientSettings, KubeApi
from controller.clock import SystemClock
from controller.events import EventRecorder
from controller.expectations import ControllerExpectations
from controller.informer import (
    EventHandler,
    Informer,
    Transform,
    chain_transforms,
    strip_managed_fields,
)
from controller.kube import PODS, SERVICES, Resource, ResourceClient
from controller.leader import LeaseElector
from controller.logging import add_logging_flags, configure_logging
from controller.metrics import Metrics
from controller.runtime import Controller, Manager
from controller.server import add_server_flags, serve_probes
from controller.store import (
    CONTROLLER_UID_INDEX,
    IndexFunc,
    controller_ref,
    index_by_controller_uid,
    key_of,
)
from controller.types import JSON, object_key
from reconcile.labels import DEFAULT_OPERATOR_NAME, OPERATOR_NAME_LABEL
from reconcile.metrics import JobMetrics
from reconcile.models import API_VERSION, GROUP, KIND, PLURAL, VERSION
from reconcile.plan import PlanConfig
from reconcile.slim import slim_pod, slim_service
from reconcile.tfjob import Caches, TFJobReconciler, Writers, pods_key, services_key

log = structlog.get_logger("tfjob-controller")

TFJOBS = Resource(GROUP, VERSION, PLURAL, kind=KIND)
CONTROLLER_NAME = "tfjob-controller"

#: Cache transforms. TFJobs are kept whole (the spec is the job); pods and services
#: only with the fields the reconciler reads.
JOB_TRANSFORM: Transform = strip_managed_fields
POD_TRANSFORM: Transform = chain_transforms(strip_managed_fields, slim_pod)
SERVICE_TRANSFORM: Transform = chain_transforms(strip_managed_fields, slim_service)
#: Children are only ever looked up by their controller's UID (reconcile.tfjob).
CHILD_INDEXERS: dict[str, IndexFunc] = {CONTROLLER_UID_INDEX: index_by_controller_uid}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="tfjob-controller",
        description="Kubernetes controller for TensorFlow training jobs (TFJob, kubeflow.org/v1).",
    )
    p.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG") or None,
        help="kubeconfig path (default: $KUBECONFIG, then in-cluster config)",
    )
    p.add_argument("--context", default=None, help="kubeconfig context")
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
        "--cluster-domain",
        default=os.environ.get("CUSTOM_CLUSTER_DOMAIN") or None,
        help="suffix for TF_CONFIG addresses (default: $CUSTOM_CLUSTER_DOMAIN)",
    )
    p.add_argument(
        "--restart-backoff-base",
        type=float,
        default=10.0,
        help="seconds before the first replacement of a failed pod (default 10)",
    )
    p.add_argument(
        "--restart-backoff-max",
        type=float,
        default=360.0,
        help="cap of the replacement backoff in seconds (default 360)",
    )
    add_server_flags(p)
    add_logging_flags(p)
    return p.parse_args(argv)


def owner_job_key(obj: JSON) -> str | None:
    """The TFJob key of a pod or service whose controller is a TFJob."""
    ref = controller_ref(obj)
    if not ref or ref.get("kind") != KIND or ref.get("apiVersion") != API_VERSION:
        return None
    return object_key(obj["metadata"].get("namespace"), ref["name"])


def child_handler(
    exp_key: Callable[[str], str],
    expectations: ControllerExpectations,
    enqueue: Callable[[str], None],
) -> EventHandler:
    def on_add(obj: JSON) -> None:
        key = owner_job_key(obj)
        if key:
            expectations.creation_observed(exp_key(key))
            enqueue(key)

    def on_update(old: JSON, new: JSON) -> None:
        key = owner_job_key(new)
        if not key:
            return
        if new["metadata"].get("deletionTimestamp") and not old["metadata"].get(
            "deletionTimestamp"
        ):
            # A deletion in progress counts as observed once; the final delete, keyed by
            # UID, then finds nothing left to lower.
            expectations.deletion_observed(exp_key(key), new["metadata"]["uid"])
        enqueue(key)

    def on_delete(obj: JSON) -> None:
        key = owner_job_key(obj)
        if key:
            expectations.deletion_observed(exp_key(key), obj["metadata"]["uid"])
            enqueue(key)

    return EventHandler(on_add=on_add, on_update=on_update, on_delete=on_delete)


def job_handler(
    expectations: ControllerExpectations, enqueue: Callable[[str], None], metrics: JobMetrics
) -> EventHandler:
    def on_add(obj: JSON) -> None:
        key = key_of(obj)
        expectations.observe_resource_version(key, obj["metadata"].get("resourceVersion", ""))
        metrics.job_seen(obj)
        enqueue(key)

    def on_update(old: JSON, new: JSON) -> None:
        key = key_of(new)
        expectations.observe_resource_version(key, new["metadata"].get("resourceVersion", ""))
        enqueue(key)

    def on_delete(obj: JSON) -> None:
        enqueue(key_of(obj))

    return EventHandler(on_add=on_add, on_update=on_update, on_delete=on_delete)


async def run(args: argparse.Namespace) -> int:
    clock = SystemClock()
    settings = ClientSettings(qps=args.kube_api_qps, burst=args.kube_api_burst)
    api = await KubeApi.from_kubeconfig(args.kubeconfig, args.context, settings)
    async with api:
        metrics = Metrics()
        job_metrics = JobMetrics(metrics.registry)
        selector = f"{OPERATOR_NAME_LABEL}={DEFAULT_OPERATOR_NAME}"
        jobs_client = ResourceClient(api, TFJOBS)
        pods_client = ResourceClient(api, PODS)
        services_client = ResourceClient(api, SERVICES)
        common: dict[str, Any] = {"namespace": args.namespace, "clock": clock}
        job_informer = Informer(jobs_client, name="tfjobs", transform=JOB_TRANSFORM, **common)
        pod_informer = Informer(
            pods_client,
            name="pods",
            label_selector=selector,
            indexers=CHILD_INDEXERS,
            transform=POD_TRANSFORM,
            **common,
        )
        service_informer = Informer(
            services_client,
            name="services",
            label_selector=selector,
            indexers=CHILD_INDEXERS,
            transform=SERVICE_TRANSFORM,
            **common,
        )
        expectations = ControllerExpectations(clock)
        recorder = EventRecorder(api, component=CONTROLLER_NAME, clock=clock)
        reconciler = TFJobReconciler(
            caches=Caches(
                jobs=job_informer.store, pods=pod_informer.store, services=service_informer.store
            ),
            writers=Writers(jobs=jobs_client, pods=pods_client, services=services_client),
            expectations=expectations,
            events=recorder,
            clock=clock,
            config=PlanConfig(
                cluster_domain=args.cluster_domain,
                backoff_base_seconds=args.restart_backoff_base,
                backoff_max_seconds=args.restart_backoff_max,
            ),
            metrics=job_metrics,
        )
        ctrl = Controller(
            CONTROLLER_NAME,
            reconciler,
            workers=args.controller_threads,
            clock=clock,
            metrics=metrics,
        )
        # a create that fails in the background puts its job back on this queue
        reconciler.requeue = ctrl
        job_informer.add_handler(job_handler(expectations, ctrl.enqueue, job_metrics))
        pod_informer.add_handler(child_handler(pods_key, expectations, ctrl.enqueue))
        service_informer.add_handler(child_handler(services_key, expectations, ctrl.enqueue))

        elector = None
        if args.leader_elect:
            elector = LeaseElector(
                api,
                namespace=args.leader_election_namespace or _pod_namespace(),
                name=args.leader_election_id,
                clock=clock,
            )
        informers = [job_informer, pod_informer, service_informer]
        manager: Manager

        def ready() -> bool:
            return manager.caches_synced

        manager = Manager(
            informers=informers,
            controllers=[ctrl],
            elector=elector,
            services=[
                recorder.run,
                # the background writer of the reconciler's creates
                reconciler.run,
                serve_probes(
                    metrics=metrics,
                    metrics_address=args.metrics_bind_address,
                    health_address=args.health_probe_bind_address,
                    ready=ready,
                    # A lease that stopped renewing makes the process unhealthy.
                    healthy=elector.healthy if elector is not None else None,
                ),
            ],
        )
        log.info(
            "starting",
            namespace=args.namespace or "(all)",
            workers=args.controller_threads,
            qps=args.kube_api_qps,
            burst=args.kube_api_burst,
            leader_elect=args.leader_elect,
        )
        return await manager.run()


def _pod_namespace() -> str:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configure_logging(args.log_format, args.log_level)
    sys.exit(anyio.run(run, args))


if __name__ == "__main__":
    main()
