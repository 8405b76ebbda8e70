"""/metrics made safe to expose (--metrics-secure, the default): TLS and the guard.

The certificate is the operator's (``--metrics-cert-dir`` with ``tls.crt`` and
``tls.key``, e.g. cert-manager's Secret mounted there; re-read when it changes) or one
made for the first scrape and held in memory, signed by a CA of its own as Kubebuilder's
self-signed default is: scrapers then skip verification or pin nothing, and the
traffic is still encrypted. Made at the first handshake, not at start-up: a process
nobody scrapes (a developer's, a benchmark's) never loads the X.509 library nor signs
anything, a tenth of its start. Reviews go to the apiserver outside the client's rate
limit: a scrape must not wait behind creates, and the cache keeps them rare.
"""

from __future__ import annotations

import argparse
import functools
import socket
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controller.client.api import KubeApi
from controller.observability.server import Guard, TLSContext
from controller.serving.access import RequestGuard
from controller.serving.certs import self_signed
from controller.serving.limits import Budget
from controller.serving.tls import FileCertificate, memory_context
from controller.serving.tokenreview import Post
from controller.types import Clock

METRICS_SERVICE = "tfjob-controller-metrics"


def metrics_protection(
    args: argparse.Namespace,
    api: KubeApi,
    clock: Clock,
    namespace: str,
    budget: Budget | None = None,
) -> tuple[TLSContext | None, Guard | None]:
    """The metrics server's TLS context and request guard; (None, None) when
    --metrics-secure is false. ``budget``: the reviews a second the process may ask."""
    if not args.metrics_secure or args.metrics_bind_address == "0":
        return None, None
    guard = RequestGuard.for_api(review_post(api), clock, budget)
    return metrics_tls(args.metrics_cert_dir, clock, namespace), guard


def review_post(api: KubeApi) -> Post:
    """POSTs for the apiserver's reviews (TokenReview, SubjectAccessReview) on a client
    of their own, outside the client-side rate limit (why: tfjob_controller.reporting)."""
    review_api = api.sibling(tick=0.0, qps=0)

    async def post(path: str, body: Mapping[str, Any]) -> Any:
        return await review_api.request("POST", path, body=body)

    return post


def metrics_tls(cert_dir: str, clock: Clock, namespace: str) -> TLSContext:
    if cert_dir:
        cert = FileCertificate(Path(cert_dir) / "tls.crt", Path(cert_dir) / "tls.key", clock)
        return cert.context
    service = f"{METRICS_SERVICE}.{namespace}.svc"
    hosts = [
        service,
        f"{METRICS_SERVICE}.{namespace}",
        socket.gethostname(),
        "localhost",
        "127.0.0.1",
    ]

    @functools.cache
    def context() -> ssl.SSLContext:
        pair = self_signed(hosts, clock.now(), "tfjob-controller metrics CA")
        return memory_context(pair.tls_crt, pair.tls_key)

    return context
