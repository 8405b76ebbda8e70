"""The kubeconfig's oidc auth-provider: the id-token refreshed with the refresh token
before it expires and after a 401, against a stand-in identity provider over TLS (its
own CA, as a kubeconfig names it), and the rotated tokens saved back to the kubeconfig
as kubectl does."""

from __future__ import annotations

import base64
import json
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from controller import errors
from controller.client.api import KubeApi, load_configuration
from controller.client.auth import credentials
from tests.unit.controller.conftest import self_signed, serving

POD = "/api/v1/namespaces/ns/pods/a"


def jwt(claims: dict[str, Any]) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part(claims)}.sig"


class Issuer:
    """Hands out id-token N+1 and refresh token rt-(N+1) for refresh token rt-N, to
    client c / secret s only; ``life`` seconds of validity each."""

    def __init__(self, life: float = 600) -> None:
        self.life = life
        self.issued = 1
        self.refreshes: list[str] = []

    def token(self, n: int) -> str:
        return jwt({"sub": "dev", "n": n, "exp": int(time.time() + self.life)})

    async def well_known(self, request: web.Request) -> web.Response:
        return web.json_response({"token_endpoint": f"{request.url.origin()}/token"})

    async def token_endpoint(self, request: web.Request) -> web.Response:
        form = await request.post()
        if request.headers.get("Authorization") != "Basic " + base64.b64encode(b"c:s").decode():
            return web.json_response({"error": "invalid_client"}, status=401)
        if form.get("grant_type") != "refresh_token":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        if form.get("refresh_token") != f"rt-{self.issued}":
            return web.json_response({"error": "invalid_grant"}, status=400)
        self.refreshes.append(str(form["refresh_token"]))
        self.issued += 1
        return web.json_response(
            {"id_token": self.token(self.issued), "refresh_token": f"rt-{self.issued}"}
        )


def _tls(tmp_path: Path) -> tuple[ssl.SSLContext, bytes]:
    crt, key = self_signed(tmp_path, "idp")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(crt), str(key))
    return ctx, crt.read_bytes()


@asynccontextmanager
async def identity_provider(issuer: Issuer, tls: ssl.SSLContext) -> AsyncIterator[str]:
    async with serving(
        {"/.well-known/openid-configuration": issuer.well_known},
        {"/token": issuer.token_endpoint},
        tls,
    ) as url:
        yield url


def kubeconfig(tmp_path: Path, server: str, idp: str, ca: bytes | None, id_token: str) -> Path:
    provider: dict[str, Any] = {
        "idp-issuer-url": idp,
        "client-id": "c",
        "client-secret": "s",
        "refresh-token": "rt-1",
        "id-token": id_token,
    }
    if ca is not None:
        provider["idp-certificate-authority-data"] = base64.b64encode(ca).decode()
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"auth-provider": {"name": "oidc", "config": provider}}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    return path


def saved(path: Path) -> dict[str, Any]:
    cfg = yaml.safe_load(path.read_text())
    provider: dict[str, Any] = cfg["users"][0]["user"]["auth-provider"]["config"]
    return provider


async def test_the_id_token_is_refreshed_when_due_and_after_a_401(tmp_path: Path) -> None:
    issuer = Issuer()
    tls, ca = _tls(tmp_path)
    revoked: set[str] = set()
    refuse_from = [1_000]
    seen: list[int] = []

    async def pod(request: web.Request) -> web.Response:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
        seen.append(claims["n"])
        if token in revoked or claims["n"] >= refuse_from[0] or claims["exp"] < time.time():
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        return web.json_response({"metadata": {"name": "a"}})

    async with identity_provider(issuer, tls) as idp, serving({POD: pod}) as server:
        expired = jwt({"sub": "dev", "n": 1, "exp": int(time.time() - 60)})
        path = kubeconfig(tmp_path, server, idp, ca, expired)
        cfg = await load_configuration(str(path))
        # expired at load: refreshed there, and the rotated pair saved for kubectl
        assert issuer.refreshes == ["rt-1"]
        assert saved(path)["refresh-token"] == "rt-2"
        assert saved(path)["id-token"] == issuer_token(cfg)
        creds = credentials.of(cfg)
        assert isinstance(creds, credentials.OidcCredentials)
        wall = [time.time()]
        creds._wall = lambda: wall[0]
        api = KubeApi(cfg)
        try:
            await api.request("GET", POD)
            assert seen[-1] == 2 and issuer.refreshes == ["rt-1"]
            # within a fifth of its life (at most 30 s) of the id-token's exp: refreshed
            wall[0] += issuer.life - 29
            await api.request("GET", POD)
            assert issuer.refreshes == ["rt-1", "rt-2"] and seen[-1] == 3
            assert saved(path)["refresh-token"] == "rt-3"
            # the apiserver stops taking the token: one refresh, the request once more
            revoked.add(issuer_token(cfg))
            await api.request("GET", POD)
            assert issuer.refreshes == ["rt-1", "rt-2", "rt-3"] and seen[-2:] == [3, 4]
            # refused again and again: reported, not retried in a loop
            refuse_from[0] = 4  # the apiserver takes none of this provider's tokens now
            with pytest.raises(errors.ApiError) as err:
                await api.request("GET", POD)
            assert err.value.status == 401
            assert issuer.refreshes[-1] == "rt-4" and seen[-2:] == [4, 5]
        finally:
            await api.close()


def issuer_token(cfg: Any) -> str:
    return str(cfg.api_key["BearerToken"]).removeprefix("Bearer ")


async def test_the_identity_provider_must_prove_who_it_is(tmp_path: Path) -> None:
    """Without the provider's CA in the kubeconfig the system trust store decides, and a
    self-signed provider is refused: a refresh token is never sent to an impostor."""
    issuer = Issuer()
    tls, _ca = _tls(tmp_path)
    async with identity_provider(issuer, tls) as idp:
        expired = jwt({"sub": "dev", "n": 1, "exp": int(time.time() - 60)})
        path = kubeconfig(tmp_path, "http://127.0.0.1:1", idp, None, expired)
        with pytest.raises(Exception, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify"):
            await load_configuration(str(path))
    assert issuer.refreshes == []


def test_jwt_expiry() -> None:
    assert credentials.jwt_expiry(jwt({"exp": 1700000000})) == 1700000000.0
    assert credentials.jwt_expiry(jwt({"sub": "x"})) is None
    assert credentials.jwt_expiry("not-a-jwt") is None
    assert credentials.jwt_expiry("a.!!!.c") is None
