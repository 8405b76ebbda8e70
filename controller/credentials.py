"""Kubeconfig credentials that expire: an exec plugin's token, fetched again when due.

Managed clusters' kubeconfigs (EKS, GKE, AKS) authenticate through exec credential
plugins whose tokens live minutes. kubernetes-asyncio runs the plugin once, when the
kubeconfig is loaded, and offers only a polling loop to run it again; its own expiry
check also keeps five minutes of margin, which for a plugin whose tokens live less than
that means running the plugin before every request. So, as client-go does:

- the token is used until shortly before the plugin's ``expirationTimestamp`` (a margin
  of a fifth of the token's life, at most 30 s), then the plugin is run again, once,
  however many requests are waiting (``refresh``, the configuration's refresh hook,
  which every request calls before reading the token);
- a plugin that gives no expirationTimestamp is run again only after a 401;
- a 401 runs the plugin again at once (``renew``); the caller retries the request once
  and, if the answer is still 401, reports it and leaves the retry to its backoff.

A plugin that fails keeps the old token (it may still be good) and is tried again on
the next request after ``RETRY_AFTER_FAILURE_SECONDS``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import structlog

log = structlog.get_logger(__name__)

MAX_MARGIN_SECONDS = 30.0
RETRY_AFTER_FAILURE_SECONDS = 5.0


class ExecCredentials:
    """The refresh hook of a configuration whose kubeconfig user is an exec plugin."""

    def __init__(self, loader: Any, wall: Callable[[], float] = time.time) -> None:
        #: kubernetes-asyncio's KubeConfigLoader, which runs the plugin and keeps its
        #: last answer (``token``, ``exec_plugin_expiry``)
        self._loader = loader
        self._wall = wall
        self._lock = anyio.Lock()
        self._due: float | None = None
        self._issued = wall()
        self._plan_next()
        #: how many times the plugin ran after the kubeconfig was loaded (tests, logs)
        self.runs = 0

    def _plan_next(self) -> None:
        expiry: datetime | None = getattr(self._loader, "exec_plugin_expiry", None)
        if expiry is None:
            self._due = None  # no expiry given: until a 401 says otherwise
            return
        if expiry.tzinfo is None:
            expiry = expiry.replace(tzinfo=UTC)
        ends = expiry.timestamp()
        margin = min(MAX_MARGIN_SECONDS, max(0.0, ends - self._issued) / 5)
        self._due = ends - margin

    async def refresh(self, configuration: Any) -> None:
        """Before each request: the token, run again if it is due."""
        if self._due is None or self._wall() < self._due:
            return
        await self._run(configuration, why="expiring")

    async def renew(self, configuration: Any) -> bool:
        """After a 401: run the plugin now. True when it gave a different token."""
        before = configuration.api_key.get("BearerToken")
        await self._run(configuration, why="unauthorized")
        return bool(configuration.api_key.get("BearerToken")) and (
            configuration.api_key.get("BearerToken") != before
        )

    async def _run(self, configuration: Any, *, why: str) -> None:
        due = self._due
        async with self._lock:
            if why == "expiring" and self._due != due:
                return  # another request ran it while this one waited
            if hasattr(self._loader, "exec_plugin_expiry"):
                # the loader's own check (five minutes of margin) would skip or not
                # skip the run by its own rule: it runs because we say it is due
                del self._loader.exec_plugin_expiry
            started = self._wall()
            try:
                await self._loader.load_from_exec_plugin()
            except Exception as e:
                self._due = started + RETRY_AFTER_FAILURE_SECONDS
                log.warning(
                    "exec credential plugin failed; keeping the old token",
                    reason=why,
                    error=str(e)[:300],
                    retry_in=RETRY_AFTER_FAILURE_SECONDS,
                )
                return
            self.runs += 1
            self._issued = started
            token = getattr(self._loader, "token", None)
            if token:
                configuration.api_key["BearerToken"] = token
            self._plan_next()
            log.info(
                "exec credential refreshed",
                reason=why,
                next_in=None if self._due is None else round(self._due - self._wall(), 1),
            )


def install(configuration: Any, loader: Any) -> ExecCredentials | None:
    """Give ``configuration`` the refresh hook its kubeconfig user needs, if any."""
    user = getattr(loader, "_user", None)
    if user is None or "exec" not in user:
        return None
    creds = ExecCredentials(loader)
    configuration.refresh_api_key_hook = creds.refresh
    configuration.exec_credentials = creds
    return creds


def of(configuration: Any) -> ExecCredentials | None:
    creds = getattr(configuration, "exec_credentials", None)
    return creds if isinstance(creds, ExecCredentials) else None


__all__ = ["ExecCredentials", "install", "of"]
