"""Credentials never reach the log.

A real client (KubeApi, with a bearer token or basic auth) talks to a local HTTP
stand-in for an apiserver that fails: 500 and 429 whose message echoes the request's
Authorization header back (as a broken proxy might), and a request that times out. The
failure goes up through the runtime's worker, which logs it with a traceback, exactly
as in production. Every line of the output, JSON and console, is searched for the
secret and for the base64 form basic auth sends.
"""

from __future__ import annotations

import asyncio
import base64
import io
import logging
from collections.abc import AsyncIterator, Iterator

import pytest
import structlog
from aiohttp import web
from kubernetes_asyncio.client.configuration import Configuration

from controller.client.api import ClientSettings, KubeApi
from controller.clock import FakeClock
from controller.observability.logging import configure_logging, redact
from controller.queue.ratelimit import default_controller_rate_limiter
from controller.queue.workqueue import WorkQueue
from controller.runtime.controller import Controller
from controller.types import Result
from tests.unit.controller.conftest import serving

TOKEN = "tfjob-test-s3cr3t-tok"
PASSWORD = "pw-s3cr3t"


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    yield
    structlog.reset_defaults()
    logging.getLogger().handlers.clear()


async def _echo_auth(request: web.Request) -> web.Response:
    status = int(request.query.get("status", "500"))
    if status == 0:
        await asyncio.sleep(1)  # longer than the client's timeout
        status = 500
    auth = request.headers.get("Authorization", "")
    body = {
        "kind": "Status",
        "status": "Failure",
        "reason": "InternalError",
        "code": status,
        "message": f"saw {auth.split()[-1]}; upstream said no to Authorization: {auth}",
    }
    return web.json_response(body, status=status)


@pytest.fixture
async def apiserver() -> AsyncIterator[str]:
    async with serving({"/api/v1/namespaces/ns/pods/{name}": _echo_auth}) as url:
        yield url


class FetchingReconciler:
    """A reconcile that reads a pod through the real client and lets errors rise."""

    def __init__(self, api: KubeApi, query: str) -> None:
        self.api = api
        self.query = query

    async def reconcile(self, key: str) -> Result:
        await self.api.request("GET", "/api/v1/namespaces/ns/pods/p", params={"status": self.query})
        return Result()


def _configuration(host: str, auth: str) -> Configuration:
    cfg = Configuration(host=host)
    if auth == "bearer":
        cfg.api_key = {"BearerToken": TOKEN}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
    else:
        cfg.username, cfg.password = "admin", PASSWORD
    return cfg


@pytest.mark.parametrize("log_format", ["json", "console"])
@pytest.mark.parametrize("auth", ["bearer", "basic"])
@pytest.mark.parametrize("query", ["500", "429", "0"], ids=["5xx", "429", "timeout"])
async def test_failed_requests_log_no_credentials(
    apiserver: str, log_format: str, auth: str, query: str
) -> None:
    out = io.StringIO()
    configure_logging(log_format, "debug", stream=out)
    # The runtime's module logger must not keep this configuration for later tests.
    structlog.configure(cache_logger_on_first_use=False)
    settings = ClientSettings(request_timeout=0.2)
    async with KubeApi(_configuration(apiserver, auth), settings) as api:
        clock = FakeClock()
        queue = WorkQueue[str](
            "t", clock=clock, rate_limiter=default_controller_rate_limiter(clock)
        )
        ctl = Controller("t", FetchingReconciler(api, query), clock=clock, queue=queue)
        await ctl.process("ns/a")
    text = out.getvalue()
    # the failure was logged, with its traceback
    assert "reconciled" in text and ("Traceback" in text or '"frames"' in text), text
    secrets = [TOKEN, PASSWORD, base64.b64encode(f"admin:{PASSWORD}".encode()).decode()]
    for n, line in enumerate(text.splitlines()):
        for secret in secrets:
            assert secret not in line, f"line {n} leaks a credential: {line[:300]}"


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        pytest.param("Authorization: Bearer abc.def-ghi", "Authorization: [REDACTED]", id="bearer"),
        pytest.param(
            "{'Authorization': 'Basic YWRtaW46cHc='}", "'Authorization': '[REDACTED]'", id="dict"
        ),
        pytest.param("token bearer xyz123 sent", "bearer [REDACTED] sent", id="bare-bearer"),
        pytest.param(
            "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----",
            "[REDACTED PRIVATE KEY]",
            id="pem-key",
        ),
        pytest.param("jwt eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl", "jwt [REDACTED]", id="jwt"),
        pytest.param("password=hunter2&x=1", "password=[REDACTED]&x=1", id="password-param"),
        pytest.param("pod ns/p failed: exit 1", "pod ns/p failed: exit 1", id="ordinary-text"),
    ],
)
def test_redact_patterns(text: str, kept: str) -> None:
    assert kept in redact(text)
