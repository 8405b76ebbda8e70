"""The training-progress endpoint, composed: flags, the HTTPS server, the TokenReview
cache, the per-pod limits, the CA bundle in job namespaces, and the TFJob intake
(docs/progress.md).

The endpoint is on when ``--progress-url`` (the address pods reach it at) is given;
without it the controller neither serves reports nor gives pods anything for them. Its
certificate is the operator's (``--progress-cert-file``/``--progress-key-file``, with
``--progress-ca-file`` the CA that pods verify it with), or one the controller makes
and keeps in a Secret (``--progress-cert-secret``, controller.serving.certs).
"""

from __future__ import annotations

import argparse
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from controller.client.api import KubeApi
from controller.client.kube import CONFIGMAPS, SECRETS, ResourceClient
from controller.observability.prometheus import Registry
from controller.runtime.pacer import Pacer, SlotGate
from controller.serving.bundle import BundleDistributor
from controller.serving.certs import SecretCertificate, private_dir
from controller.serving.limits import Budget, KeyedLimiter
from controller.serving.reports import (
    MAX_CONNECTIONS,
    MAX_PER_SOURCE,
    STRANGER_CONNECTIONS,
    ReportServer,
)
from controller.serving.tls import FileCertificate
from controller.serving.tokenreview import TokenReviewer
from controller.types import JSON, CacheReader, Clock, EventHandler, EventSink, KeyQueue
from reconcile.objects.reporting import CA_CONFIGMAP, CA_KEY, DEFAULT_TOKEN_SECONDS, Reporting
from reconcile.policy.conditions import WARNING
from reconcile.progress.wire import MAX_BODY_BYTES
from reconcile.sync.progress import ProgressIntake
from tfjob_controller.secure_metrics import review_post

DEFAULT_BIND = ":10443"
#: the Warning on a job whose namespace's CA bundle could not be written
REASON_CA_REFUSED = "ProgressCABundleRefused"
DEFAULT_CERT_SECRET = "tfjob-controller-progress-tls"
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
    g.add_argument(
        "--progress-cert-file",
        default="",
        help="the endpoint's TLS certificate (PEM), e.g. a cert-manager Secret's tls.crt"
        " mounted; re-read when it changes. Without it the controller makes its own"
        " (--progress-cert-secret)",
    )
    g.add_argument("--progress-key-file", default="", help="its private key (PEM)")
    g.add_argument(
        "--progress-ca-file",
        default="",
        help="with --progress-cert-file: the CA pods verify the endpoint with (PEM), kept"
        f" as ConfigMap {CA_CONFIGMAP} in each job's namespace",
    )
    g.add_argument(
        "--progress-cert-secret",
        default=DEFAULT_CERT_SECRET,
        help="without --progress-cert-file: the Secret (in the controller's namespace, or"
        " NAMESPACE/NAME) where the controller keeps the CA and serving certificate it"
        " makes for --progress-url's host, shared by its replicas, renewed 30 days before"
        " expiry (default %(default)s)",
    )
    g.add_argument(
        "--progress-cert-dir",
        default="",
        help="the directory in which a private one, made afresh by each process (mode"
        " 0700), holds a made certificate for the TLS context (default: the system's"
        " temporary directory, looked up only then: a read-only root filesystem may have"
        " none)",
    )
    g.add_argument(
        "--progress-status-interval",
        type=float,
        default=DEFAULT_STATUS_INTERVAL,
        help="seconds between a job's status writes that carry training progress alone"
        " (default %(default)s)",
    )
    g.add_argument(
        "--progress-status-qps",
        type=float,
        default=0.0,
        help="status writes a second that carry training progress alone, all jobs"
        " together, each waiting job given a slot of its own; 0 (default): half of"
        " --kube-api-qps, so lifecycle writes always have the other half",
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
        "--progress-max-connections-per-source",
        type=int,
        default=MAX_PER_SOURCE,
        help="connections one source address may hold to the endpoint; a pod keeps one, a"
        " node's host-network pods share its address; 0: no cap (default %(default)s)",
    )
    g.add_argument(
        "--progress-stranger-connections",
        type=float,
        default=STRANGER_CONNECTIONS,
        help="new connections a second, all together, from addresses no pod of ours has"
        " (a burst of twice as many); more are closed before TLS; our pods' own are never"
        " held to it; 0: no limit (default %(default)s)",
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
    files = {
        "--progress-cert-file": args.progress_cert_file,
        "--progress-key-file": args.progress_key_file,
        "--progress-ca-file": args.progress_ca_file,
    }
    given = [f for f, v in files.items() if v]
    if given and len(given) < len(files):
        missing = [f for f, v in files.items() if not v]
        return f"{', '.join(given)} needs {', '.join(missing)} too"
    if not given and not args.progress_cert_secret:
        return "--progress-url needs --progress-cert-file (and key, CA) or --progress-cert-secret"
    if args.progress_max_connections_per_source < 0:
        return "--progress-max-connections-per-source must be 0 (no cap) or more"
    if not (args.progress_stranger_connections >= 0):  # NaN too
        return "--progress-stranger-connections must be 0 (no limit) or more"
    if args.progress_token_seconds < 600:
        return "--progress-token-seconds must be at least 600 (the apiserver's minimum)"
    return None


def stranger_budget(clock: Clock, rate: float) -> Budget | None:
    """New connections a second from addresses no pod of ours has; None: no limit."""
    if rate <= 0:
        return None
    return Budget(clock, rate=rate, burst=max(1, int(2 * rate)))


def reporting_of(args: argparse.Namespace) -> Reporting | None:
    if not args.progress_url:
        return None
    return Reporting(args.progress_url, token_seconds=args.progress_token_seconds)


@dataclass
class ProgressEndpoint:
    intake: ProgressIntake
    training_pacer: Pacer[str]
    training_gate: SlotGate[str] | None
    server: ReportServer
    bundle: BundleDistributor
    #: the certificate the controller keeps itself, when none is given
    made: SecretCertificate | None = None
    #: where a namespace's refused bundle is reported, on the job that wanted it
    events: EventSink | None = None
    #: each namespace's last job seen, as an event's object (its reference only)
    _wanted_by: dict[str, JSON] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.bundle.on_refused = self._refused

    @property
    def services(self) -> list[Any]:
        """What runs on every replica: the server, and the made certificate's renewal."""
        return [self.server.serve, *([self.made.run] if self.made else [])]

    def namespace_handler(self) -> EventHandler:
        """For the TFJob informer: a job's namespace gets the CA bundle."""

        def on_add(obj: JSON) -> None:
            meta = obj["metadata"]
            namespace = meta.get("namespace", "")
            ref = {k: meta.get(k) for k in ("name", "namespace", "uid")}
            self._wanted_by[namespace] = {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "metadata": ref,
            }
            self.bundle.want(namespace)

        def on_delete(obj: JSON) -> None:
            namespace = obj["metadata"].get("namespace", "")
            held = self._wanted_by.get(namespace)
            if held is not None and held["metadata"].get("uid") == obj["metadata"].get("uid"):
                del self._wanted_by[namespace]

        return EventHandler(on_add=on_add, on_delete=on_delete)

    def _refused(self, namespace: str, why: str) -> None:
        job = self._wanted_by.get(namespace)
        if job is None or self.events is None:
            return
        message = (
            f"The CA bundle ConfigMap {CA_CONFIGMAP} in namespace {namespace} could not be"
            f" written ({why[:300]}): pods here cannot verify the progress endpoint, and"
            " their reports fail until it is deleted or fixed."
        )
        self.events.event(job, WARNING, REASON_CA_REFUSED, message)


async def progress_endpoint(
    args: argparse.Namespace,
    *,
    api: KubeApi,
    clock: Clock,
    jobs: CacheReader,
    pods: CacheReader,
    queue: KeyQueue,
    registry: Registry,
    leading: Callable[[], bool],
    own_namespace: str,
    budget: Budget | None = None,
    max_connections: int = MAX_CONNECTIONS,
) -> ProgressEndpoint | None:
    """The endpoint, its certificate ready (made or read from the Secret first when the
    controller keeps its own), or None when reporting is off."""
    if not args.progress_url:
        return None
    training_pacer = Pacer[str](clock, args.progress_status_interval)
    share = args.progress_status_qps or (args.kube_api_qps / 2 if args.kube_api_qps > 0 else 0)
    training_gate = SlotGate[str](clock, share) if share > 0 else None
    intake = ProgressIntake(
        jobs=jobs, pods=pods, queue=queue, pacer=training_pacer, now=clock.now, gate=training_gate
    )
    # Reviews are bounded by how many are in flight (TokenReviewer), not by a rate: a
    # review costs the apiserver no write, and every pod of a 1,600-pod job reviewed
    # at 20 a second kept the last ones' first reports waiting 80 s. Nor do they wait
    # behind creates, or creates behind them.
    post = review_post(api)
    bundle = BundleDistributor(
        ResourceClient(api, CONFIGMAPS),
        CA_CONFIGMAP,
        CA_KEY,
        "",
        labels={"app.kubernetes.io/managed-by": "tfjob-controller"},
    )
    made: SecretCertificate | None = None
    if args.progress_cert_file:
        cert_file, key_file = Path(args.progress_cert_file), Path(args.progress_key_file)
        bundle.set_bundle(await anyio.Path(args.progress_ca_file).read_text())
    else:
        namespace, _, name = args.progress_cert_secret.rpartition("/")
        made = SecretCertificate(
            ResourceClient(api, SECRETS),
            namespace or own_namespace,
            name,
            [urllib.parse.urlsplit(args.progress_url).hostname or "localhost"],
            private_dir(Path(args.progress_cert_dir) if args.progress_cert_dir else None),
            now=clock.now,
            on_ca=bundle.set_bundle,
        )
        await made.sync()
        cert_file, key_file = made.cert_file, made.key_file
    cert = FileCertificate(cert_file, key_file, clock)
    server = ReportServer(
        address=args.progress_bind_address,
        tls=cert.context,
        sink=intake,
        reviewer=TokenReviewer(post, clock, budget=budget),
        limiter=KeyedLimiter(clock, rate=args.progress_rate, burst=args.progress_burst),
        leading=leading,
        registry=registry,
        max_body=MAX_BODY_BYTES,
        max_connections=max_connections,
        max_per_source=args.progress_max_connections_per_source,
        strangers=stranger_budget(clock, args.progress_stranger_connections),
        metric_prefix="tfjob_progress_reports",
        now=clock.now,
    )
    return ProgressEndpoint(intake, training_pacer, training_gate, server, bundle, made)
