"""The training-progress endpoint, composed: flags, the HTTPS server, the TokenReview
cache, the per-pod limits, the CA bundle in job namespaces, and the TFJob intake
(docs/progress.md).

The endpoint is on when ``--progress-url`` (the address pods reach it at) and a
serving certificate (``--progress-cert-file``/``--progress-key-file``, with
``--progress-ca-file`` the CA that pods verify it with) are given; without them the
controller neither serves reports nor gives pods anything for them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.client.api import KubeApi
from controller.client.kube import CONFIGMAPS, ResourceClient
from controller.observability.prometheus import Registry
from controller.runtime.pacer import Pacer
from controller.serving.bundle import BundleDistributor
from controller.serving.limits import KeyedLimiter
from controller.serving.reports import ReportServer
from controller.serving.tls import FileCertificate
from controller.serving.tokenreview import TokenReviewer
from controller.types import JSON, CacheReader, Clock, EventHandler, KeyQueue
from reconcile.objects.reporting import CA_CONFIGMAP, CA_KEY, DEFAULT_TOKEN_SECONDS, Reporting
from reconcile.progress.wire import MAX_BODY_BYTES
from reconcile.sync.progress import ProgressIntake

DEFAULT_BIND = ":10443"
DEFAULT_STATUS_INTERVAL = 5.0
DEFAULT_RATE = 1.0
DEFAULT_BURST = 5


def add_progress_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("training progress (docs/progress.md)")
    g.add_argument(
        "--progress-url",
        default="",
        help="the base URL pods reach the progress endpoint at, e.g."
        " https://tfjob-controller.kubeflow.svc:10443; empty (default) turns reporting off",
    )
    g.add_argument(
        "--progress-bind-address",
        default=DEFAULT_BIND,
        help="where the progress endpoint listens (default %(default)s)",
    )
    g.add_argument("--progress-cert-file", default="", help="the endpoint's TLS certificate (PEM)")
    g.add_argument("--progress-key-file", default="", help="its private key (PEM)")
    g.add_argument(
        "--progress-ca-file",
        default="",
        help="the CA pods verify the endpoint with (PEM), kept as ConfigMap"
        f" {CA_CONFIGMAP} in each job's namespace",
    )
    g.add_argument(
        "--progress-status-interval",
        type=float,
        default=DEFAULT_STATUS_INTERVAL,
        help="seconds between a job's status writes that carry training progress alone"
        " (default %(default)s)",
    )
    g.add_argument(
        "--progress-rate",
        type=float,
        default=DEFAULT_RATE,
        help="reports a second one pod may send, after a burst (default %(default)s)",
    )
    g.add_argument(
        "--progress-burst", type=int, default=DEFAULT_BURST, help="(default %(default)s)"
    )
    g.add_argument(
        "--progress-token-seconds",
        type=int,
        default=DEFAULT_TOKEN_SECONDS,
        help="lifetime of the pods' projected tokens (default %(default)s)",
    )


def check_progress_flags(args: argparse.Namespace) -> str | None:
    """Why the progress flags cannot work together, or None."""
    if not args.progress_url:
        return None
    if not args.progress_url.startswith("https://"):
        return "--progress-url must be an https:// URL"
    missing = [
        f
        for f, v in (
            ("--progress-cert-file", args.progress_cert_file),
            ("--progress-key-file", args.progress_key_file),
            ("--progress-ca-file", args.progress_ca_file),
        )
        if not v
    ]
    if missing:
        return f"--progress-url needs {', '.join(missing)}"
    if args.progress_token_seconds < 600:
        return "--progress-token-seconds must be at least 600 (the apiserver's minimum)"
    return None


def reporting_of(args: argparse.Namespace) -> Reporting | None:
    if not args.progress_url:
        return None
    return Reporting(args.progress_url, token_seconds=args.progress_token_seconds)


@dataclass
class ProgressEndpoint:
    intake: ProgressIntake
    training_pacer: Pacer[str]
    server: ReportServer
    bundle: BundleDistributor

    def namespace_handler(self) -> EventHandler:
        """For the TFJob informer: a job's namespace gets the CA bundle."""

        def on_add(obj: JSON) -> None:
            self.bundle.want(obj["metadata"].get("namespace", ""))

        return EventHandler(on_add=on_add)


def progress_endpoint(
    args: argparse.Namespace,
    *,
    api: KubeApi,
    clock: Clock,
    jobs: CacheReader,
    pods: CacheReader,
    queue: KeyQueue,
    registry: Registry,
    leading: Callable[[], bool],
) -> ProgressEndpoint | None:
    if not args.progress_url:
        return None
    training_pacer = Pacer[str](clock, args.progress_status_interval)
    intake = ProgressIntake(jobs=jobs, pods=pods, queue=queue, pacer=training_pacer, now=clock.now)
    # Reviews have a budget of their own: a burst of new tokens never waits behind
    # creates, nor they behind it.
    review_api = api.sibling(tick=0.0)

    async def post(path: str, body: Any) -> Any:
        return await review_api.request("POST", path, body=body)

    cert = FileCertificate(Path(args.progress_cert_file), Path(args.progress_key_file), clock)
    server = ReportServer(
        address=args.progress_bind_address,
        tls=cert.context,
        sink=intake,
        reviewer=TokenReviewer(post, clock),
        limiter=KeyedLimiter(clock, rate=args.progress_rate, burst=args.progress_burst),
        leading=leading,
        registry=registry,
        max_body=MAX_BODY_BYTES,
        metric_prefix="tfjob_progress_reports",
    )
    bundle = BundleDistributor(
        ResourceClient(api, CONFIGMAPS),
        CA_CONFIGMAP,
        CA_KEY,
        Path(args.progress_ca_file).read_text(),
        labels={"app.kubernetes.io/managed-by": "tfjob-controller"},
    )
    return ProgressEndpoint(intake, training_pacer, server, bundle)
