"""KubeApi.sibling: a budget of its own on the same connections (client-go's one token
bucket per REST client)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from kubernetes_asyncio.client.configuration import Configuration

from controller.client.api import ClientSettings, KubeApi
from tests.unit.controller.conftest import serving


async def _ok(request: web.Request) -> web.Response:
    return web.json_response({"kind": "Pod", "metadata": {"name": request.match_info["name"]}})


@pytest.fixture
async def apiserver() -> AsyncIterator[str]:
    async with serving({"/api/v1/namespaces/ns/pods/{name}": _ok}) as url:
        yield url


async def test_a_sibling_has_its_own_bucket_and_shares_the_connections(apiserver: str) -> None:
    # one request a minute, burst 1: a second request on the same budget would wait
    settings = ClientSettings(qps=1 / 60, burst=1)
    api = KubeApi(Configuration(host=apiserver), settings)
    sibling = api.sibling()
    try:
        t0 = time.monotonic()
        assert (await api.request("GET", "/api/v1/namespaces/ns/pods/a"))["metadata"]["name"] == "a"
        assert (await sibling.request("GET", "/api/v1/namespaces/ns/pods/b"))["metadata"][
            "name"
        ] == "b"
        assert time.monotonic() - t0 < 5, "the sibling waited for the first budget"
        assert sibling._get_pool(False) is api._get_pool(False)
        await sibling.close()  # the owner's connections stay open
        assert not api._get_pool(False).closed
        # a sibling of a sibling still uses the owner's connections
        assert sibling.sibling()._get_pool(False) is api._get_pool(False)
    finally:
        await api.close()


async def test_status_writes_and_watches_keep_exact_time_while_the_rest_wait_for_the_tick(
    apiserver: str,
) -> None:
    from tfjob_controller.app import UNAWAITED_TICK, Budgets, client_settings, parse_args

    _, settings = client_settings(parse_args(["--kube-api-tick", "0.25"]))
    tick = settings.tick
    api = KubeApi(Configuration(host=apiserver), settings)
    budgets = Budgets(api)
    try:
        assert budgets.jobs.settings.tick == 0.0, "status writes go out when their token is due"
        assert budgets.watches.settings.tick == 0.0
        # nobody waits for an event, and only a deletion for a removal
        assert budgets.events.settings.tick == UNAWAITED_TICK == 1.0
        assert budgets.releases.settings.tick == UNAWAITED_TICK
        assert budgets.podgroups.settings.tick == tick == 0.25
        assert api.settings.tick == tick, "pod and service writes keep the flag's tick"
    finally:
        await api.close()


@pytest.mark.parametrize(("tick", "slow"), [("0.1", 1.0), ("2", 2.0), ("0", 0.0)])
async def test_events_and_releases_wait_for_a_second_unless_the_tick_is_off_or_longer(
    apiserver: str, tick: str, slow: float
) -> None:
    from tfjob_controller.app import Budgets, client_settings, parse_args

    _, settings = client_settings(parse_args(["--kube-api-tick", tick]))
    api = KubeApi(Configuration(host=apiserver), settings)
    try:
        budgets = Budgets(api)
        assert budgets.events.settings.tick == budgets.releases.settings.tick == slow
    finally:
        await api.close()


async def test_each_writer_of_the_reconciler_is_on_its_own_budget(apiserver: str) -> None:
    from controller.client.kube import PODS, Resource
    from tfjob_controller.app import Budgets

    api = KubeApi(Configuration(host=apiserver), ClientSettings(qps=20, burst=30))
    try:
        budgets = Budgets(api)
        writers = budgets.writers(None)
        on = {name: getattr(writers, name).api for name in ("jobs", "pods", "services")}
        assert on == {"jobs": budgets.jobs, "pods": api, "services": api}
        assert writers.releases is not None and writers.releases.api is budgets.releases
        assert writers.releases.resource == PODS and writers.podgroups is None
        podgroups = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups")
        gang = budgets.writers(podgroups).podgroups
        assert gang is not None and gang.api is budgets.podgroups and gang.resource == podgroups
    finally:
        await api.close()


async def test_only_the_status_budget_keeps_a_reserve_for_urgent_writes(apiserver: str) -> None:
    from tfjob_controller.app import STATUS_HIGH_RESERVE, Budgets

    api = KubeApi(Configuration(host=apiserver), ClientSettings(qps=20, burst=30))
    budgets = Budgets(api)
    try:
        assert budgets.jobs.settings.high_reserve == STATUS_HIGH_RESERVE
        assert budgets.jobs._bucket._reserve == STATUS_HIGH_RESERVE
        for other in (api, budgets.events, budgets.podgroups, budgets.watches, budgets.releases):
            assert other.settings.high_reserve == 0
        # a small burst keeps most of itself for the writes in arrival order
        small = Budgets(KubeApi(Configuration(host=apiserver), ClientSettings(qps=5, burst=4)))
        assert small.jobs.settings.high_reserve == 1
    finally:
        await api.close()


def test_handed_off_writes_leave_a_fifth_of_the_connections_to_the_rest() -> None:
    from tfjob_controller.app import background_limit

    assert background_limit(ClientSettings()) == 40  # of the default pool of 50
    assert background_limit(ClientSettings(pool_size=4)) == 2
    assert background_limit(ClientSettings(pool_size=1)) == 1
