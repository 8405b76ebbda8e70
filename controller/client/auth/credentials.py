"""Kubeconfig credentials that expire: an exec plugin's, or an OIDC id-token, fetched
again when due.

Managed clusters' kubeconfigs (EKS, GKE, AKS) authenticate through exec credential
plugins whose tokens live minutes; others through the ``oidc`` auth-provider, whose
id-token lives minutes to an hour and is renewed with a refresh token. kubernetes-asyncio
fetches either once, when the kubeconfig is loaded (its expiry checks keep five minutes
of margin, which for shorter-lived tokens means fetching before every request), so, as
client-go does:

- the credential is used until shortly before it expires (a margin of a fifth of its
  life, at most 30 s): the exec plugin's ``expirationTimestamp``, the id-token's ``exp``;
  then it is fetched again, once, however many requests are waiting (``refresh``, the
  configuration's refresh hook, which every request calls before reading the token);
- a credential without an expiry is fetched again only after a 401;
- a 401 fetches it again at once (``renew``); the caller retries the request once and,
  if the answer is still 401, reports it and leaves the retry to its backoff.

A fetch that fails keeps the old credential (it may still be good) and is tried again on
the next request after ``RETRY_AFTER_FAILURE_SECONDS``.

An exec plugin may answer with a client certificate and key instead of a token; when a
run gives a new pair, ``tls_generation`` moves on and the client opens new connections
with it (``controller.client.api``).

The OIDC refresh itself is ours (``refresh_oidc``, installed in place of the loader's):
kubernetes-asyncio's does not verify the identity provider's certificate unless the
kubeconfig names a CA, and writes that CA to a temporary file. Ours verifies against
``idp-certificate-authority(-data)`` or else the system's trust store, keeps the refresh
token when the provider does not rotate it, and saves the new tokens back to the
kubeconfig as kubectl does (a rotated refresh token that is not saved would leave
kubectl with a spent one); a kubeconfig that cannot be written is logged, not fatal.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import ssl
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote_plus

import anyio
import structlog

log = structlog.get_logger(__name__)

MAX_MARGIN_SECONDS = 30.0
RETRY_AFTER_FAILURE_SECONDS = 5.0
OIDC_TIMEOUT_SECONDS = 30.0


class RefreshingCredentials:
    """The refresh hook of a configuration whose kubeconfig credential expires."""

    #: in log lines: what is fetched
    kind = "credential"

    def __init__(self, loader: Any, wall: Callable[[], float] = time.time) -> None:
        #: kubernetes-asyncio's KubeConfigLoader, which fetches the credential and keeps
        #: the last one (``token``, ``cert_file``, ``key_file``)
        self._loader = loader
        self._wall = wall
        self._lock = anyio.Lock()
        self._due: float | None = None
        self._issued = wall()
        self._plan_next()
        #: how many times it was fetched after the kubeconfig was loaded (tests, logs)
        self.runs = 0
        #: moves on each time the client certificate changes
        self.tls_generation = 0

    def _expiry(self) -> float | None:
        """When the current credential expires (seconds since the epoch), if known."""
        raise NotImplementedError

    async def _fetch(self) -> None:
        raise NotImplementedError

    def _plan_next(self) -> None:
        ends = self._expiry()
        if ends is None:
            self._due = None  # no expiry given: until a 401 says otherwise
            return
        margin = min(MAX_MARGIN_SECONDS, max(0.0, ends - self._issued) / 5)
        self._due = ends - margin

    async def refresh(self, configuration: Any) -> None:
        """Before each request: the credential, fetched again if it is due."""
        if self._due is None or self._wall() < self._due:
            return
        await self._run(configuration, why="expiring")

    async def renew(self, configuration: Any) -> bool:
        """After a 401: fetch it now. True when that gave a different credential."""
        before = (configuration.api_key.get("BearerToken"), self.tls_generation)
        await self._run(configuration, why="unauthorized")
        after = (configuration.api_key.get("BearerToken"), self.tls_generation)
        return bool(after[0] or self.tls_generation) and after != before

    async def _run(self, configuration: Any, *, why: str) -> None:
        due = self._due
        async with self._lock:
            if why == "expiring" and self._due != due:
                return  # another request fetched it while this one waited
            started = self._wall()
            try:
                await self._fetch()
            except Exception as e:
                self._due = started + RETRY_AFTER_FAILURE_SECONDS
                log.warning(
                    f"{self.kind} failed; keeping the old credential",
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
            loader = self._loader
            pair = (getattr(loader, "cert_file", None), getattr(loader, "key_file", None))
            if pair[0] and pair != (configuration.cert_file, configuration.key_file):
                configuration.cert_file, configuration.key_file = pair
                self.tls_generation += 1
            self._plan_next()
            log.info(
                f"{self.kind} refreshed",
                reason=why,
                next_in=None if self._due is None else round(self._due - self._wall(), 1),
            )


class ExecCredentials(RefreshingCredentials):
    """A kubeconfig user that is an exec credential plugin."""

    kind = "exec credential"

    def _expiry(self) -> float | None:
        expiry: datetime | None = getattr(self._loader, "exec_plugin_expiry", None)
        if expiry is None:
            return None
        if expiry.tzinfo is None:
            expiry = expiry.replace(tzinfo=UTC)
        return expiry.timestamp()

    async def _fetch(self) -> None:
        # controller.client.auth.execplugin's, which always runs the plugin: when is decided here
        await self._loader.load_from_exec_plugin()


class OidcCredentials(RefreshingCredentials):
    """A kubeconfig user with the ``oidc`` auth-provider."""

    kind = "oidc id-token"

    def _config(self) -> Any:
        return self._loader._user["auth-provider"]["config"]

    def _expiry(self) -> float | None:
        return jwt_expiry(str(self._config().value.get("id-token") or ""))

    async def _fetch(self) -> None:
        await self._loader._refresh_oidc(self._loader._user["auth-provider"])
        self._loader.token = f"Bearer {self._config().value['id-token']}"


def jwt_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT (not verified: the apiserver does that), if any."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) else None


def _idp_tls(config: dict[str, Any], base_path: str) -> ssl.SSLContext:
    """The provider's CA from the kubeconfig, else the system's trust store."""
    data = config.get("idp-certificate-authority-data")
    if data:
        return ssl.create_default_context(cadata=base64.b64decode(data).decode())
    path = config.get("idp-certificate-authority")
    if path:
        return ssl.create_default_context(cafile=os.path.join(base_path, str(path)))
    return ssl.create_default_context()


async def refresh_oidc(loader: Any, provider: Any) -> None:
    """The refresh-token grant against the provider's token endpoint: new ``id-token``
    (and ``refresh-token`` when it rotates) in the kubeconfig's provider config, saved
    back to the kubeconfig when the loader persists (a replacement for the loader's
    ``_refresh_oidc``; see the module doc)."""
    config: dict[str, Any] = provider["config"].value
    for key in ("idp-issuer-url", "client-id", "refresh-token"):
        if not config.get(key):
            raise ValueError(f"oidc: cannot refresh the id-token without {key}")
    base_path = loader._get_base_path(getattr(provider, "path", None))
    tls = _idp_tls(config, base_path)
    form = {"grant_type": "refresh_token", "refresh_token": str(config["refresh-token"])}
    headers = {"Accept": "application/json"}
    if config.get("client-secret"):
        # RFC 6749 2.3.1: each part form-encoded, then HTTP Basic
        pair = f"{quote_plus(str(config['client-id']))}:{quote_plus(str(config['client-secret']))}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    else:
        form["client_id"] = str(config["client-id"])  # a public client
    # imported here: only a kubeconfig with an OIDC provider needs an HTTP client that
    # speaks to arbitrary hosts (and honours HTTPS_PROXY), and it costs ~13 MB resident
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=OIDC_TIMEOUT_SECONDS)
    issuer = str(config["idp-issuer-url"]).rstrip("/")
    async with aiohttp.ClientSession(timeout=timeout, trust_env=True) as session:
        async with session.get(f"{issuer}/.well-known/openid-configuration", ssl=tls) as r:
            if r.status != 200:
                raise ValueError(f"oidc: {issuer} discovery answered {r.status}")
            endpoint = (await r.json(content_type=None)).get("token_endpoint")
        if not endpoint:
            raise ValueError(f"oidc: {issuer} names no token_endpoint")
        async with session.post(endpoint, data=form, headers=headers, ssl=tls) as r:
            body = await r.json(content_type=None) if r.content_length != 0 else {}
            if r.status != 200 or not isinstance(body, dict) or not body.get("id_token"):
                reason = body.get("error") if isinstance(body, dict) else None
                raise ValueError(f"oidc: token endpoint answered {r.status} ({reason})")
    config["id-token"] = body["id_token"]
    if body.get("refresh_token"):
        config["refresh-token"] = body["refresh_token"]
    persist = getattr(loader, "_config_persister", None)
    if persist is not None:
        try:
            persist()  # the kubeconfig files' merger, which shares these dicts
        except OSError as e:
            log.warning("oidc: refreshed tokens not saved to the kubeconfig", error=str(e))


def install(configuration: Any, loader: Any) -> RefreshingCredentials | None:
    """Give ``configuration`` the refresh hook its kubeconfig user needs, if any."""
    user = getattr(loader, "_user", None)
    if user is None:
        return None
    creds: RefreshingCredentials
    if "exec" in user:
        creds = ExecCredentials(loader)
    elif getattr(loader, "provider", None) == "oidc":
        creds = OidcCredentials(loader)
    else:
        return None
    configuration.refresh_api_key_hook = creds.refresh
    configuration.refreshing_credentials = creds
    return creds


def of(configuration: Any) -> RefreshingCredentials | None:
    creds = getattr(configuration, "refreshing_credentials", None)
    return creds if isinstance(creds, RefreshingCredentials) else None


__all__ = [
    "ExecCredentials",
    "OidcCredentials",
    "RefreshingCredentials",
    "install",
    "jwt_expiry",
    "of",
    "refresh_oidc",
]
