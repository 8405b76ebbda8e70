"""Exec-plugin credentials: run again shortly before they expire and after a 401."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import anyio
import pytest
from aiohttp import web
from kubernetes_asyncio.client.configuration import Configuration

from controller import errors
from controller.client.api import KubeApi
from controller.client.auth import credentials
from tests.unit.controller.conftest import serving


class FakeLoader:
    """kubernetes-asyncio's KubeConfigLoader, with controller.client.auth.execplugin's exec path
    installed (it always runs the plugin): each run gives token-N, valid for ``life``
    seconds of the fake wall clock."""

    def __init__(self, wall: list[float], life: float | None = 15.0) -> None:
        self._user = {"exec": {"command": "plugin"}}
        self.wall = wall
        self.life = life
        self.runs = 0
        self.fail = False
        self._issue()

    def _issue(self) -> None:
        self.runs += 1
        self.token = f"Bearer token-{self.runs}"
        if self.life is not None:
            self.exec_plugin_expiry = datetime.fromtimestamp(self.wall[0] + self.life, UTC)

    async def load_from_exec_plugin(self) -> bool:
        if self.fail:
            raise RuntimeError("exec: process returned 1. no network")
        await anyio.sleep(0.01)  # a subprocess: other requests may arrive meanwhile
        self._issue()
        return True


def configured(loader: FakeLoader, wall: list[float]) -> tuple[Configuration, Any]:
    cfg = Configuration(host="http://127.0.0.1:1")
    cfg.api_key["BearerToken"] = loader.token
    creds = credentials.ExecCredentials(loader, wall=lambda: wall[0])
    cfg.refresh_api_key_hook = creds.refresh
    cfg.refreshing_credentials = creds
    return cfg, creds


async def test_run_again_shortly_before_expiry_once_for_all_waiting() -> None:
    wall = [1000.0]
    loader = FakeLoader(wall)
    cfg, creds = configured(loader, wall)
    await cfg.auth_settings()
    assert loader.runs == 1, "a fresh token is used as it is"
    wall[0] += 11.0  # 15 s token, margin 3 s: not yet due
    await cfg.auth_settings()
    assert loader.runs == 1
    wall[0] += 1.5  # due
    async with anyio.create_task_group() as tg:
        for _ in range(10):  # ten requests at once: one run of the plugin
            tg.start_soon(cfg.auth_settings)
    assert loader.runs == 2 and creds.runs == 1
    assert cfg.api_key["BearerToken"] == "Bearer token-2"


async def test_a_failing_plugin_keeps_the_old_token_and_is_tried_again() -> None:
    wall = [1000.0]
    loader = FakeLoader(wall)
    cfg, _creds = configured(loader, wall)
    wall[0] += 14.0
    loader.fail = True
    await cfg.auth_settings()
    assert cfg.api_key["BearerToken"] == "Bearer token-1"
    loader.fail = False
    await cfg.auth_settings()  # within the retry delay: not run
    assert loader.runs == 1
    wall[0] += credentials.RETRY_AFTER_FAILURE_SECONDS
    await cfg.auth_settings()
    assert cfg.api_key["BearerToken"] == "Bearer token-2"


async def test_a_401_runs_the_plugin_and_the_request_once_more() -> None:
    wall = [1000.0]
    loader = FakeLoader(wall, life=None)  # no expirationTimestamp: only a 401 renews
    cfg, _creds = configured(loader, wall)
    accepted = {"Bearer token-2"}
    seen: list[str] = []

    async def pod(request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        seen.append(auth)
        if auth not in accepted:
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        return web.json_response({"kind": "Pod", "metadata": {"name": "a"}})

    async with serving({"/api/v1/namespaces/ns/pods/a": pod}) as url:
        cfg.host = url
        api = KubeApi(cfg)
        try:
            got = await api.request("GET", "/api/v1/namespaces/ns/pods/a")
            assert got["metadata"]["name"] == "a"
            assert seen == ["Bearer token-1", "Bearer token-2"]
            # a credential the apiserver keeps refusing: one renewal, then the error
            accepted.clear()
            with pytest.raises(errors.ApiError) as err:
                await api.request("GET", "/api/v1/namespaces/ns/pods/a")
            assert err.value.status == 401
            assert seen[-2:] == ["Bearer token-2", "Bearer token-3"]
        finally:
            await api.close()


def test_only_exec_users_get_a_hook() -> None:
    cfg = Configuration(host="http://127.0.0.1:1")
    plain = FakeLoader([0.0])
    plain._user = {"token": "x"}  # type: ignore[assignment]
    assert credentials.install(cfg, plain) is None and cfg.refresh_api_key_hook is None
    assert credentials.install(cfg, FakeLoader([0.0])) is not None
    assert cfg.refresh_api_key_hook is not None
