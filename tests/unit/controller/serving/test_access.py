"""Secure metrics' guard: the token reviewed, then the path authorized; both cached."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest

from controller.clock import FakeClock
from controller.serving.access import (
    ALLOW_TTL,
    DENY_TTL,
    TOKEN_TTL,
    AccessReviewer,
    RequestGuard,
    bearer,
)
from controller.serving.tokenreview import REVIEW_PATH as TOKEN_PATH
from controller.types import Caller

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class Apiserver:
    """Knows two tokens: "scraper" (may get /metrics) and "nobody" (may get nothing)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Mapping[str, Any]]] = []
        self.down = False
        self.gate: anyio.Event | None = None

    async def post(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        self.calls.append((path, body))
        if self.gate is not None:
            await self.gate.wait()
        if self.down:
            raise OSError("connection refused")
        if path == TOKEN_PATH:
            token = body["spec"]["token"]
            if token not in ("scraper", "nobody"):
                return {"status": {"authenticated": False, "error": "invalid bearer token"}}
            user = {"username": f"system:serviceaccount:mon:{token}", "uid": "u-" + token}
            user |= {"groups": ["system:serviceaccounts"], "extra": {"x": ["1"]}}
            return {"status": {"authenticated": True, "user": user}}
        assert path == SAR_PATH
        spec = body["spec"]
        allowed = spec["user"].endswith(":scraper") and spec["nonResourceAttributes"] == {
            "path": "/metrics",
            "verb": "get",
        }
        return {"status": {"allowed": allowed}}

    def count(self, path: str) -> int:
        return sum(1 for p, _ in self.calls if p == path)


def guard(api: Apiserver, clock: FakeClock) -> RequestGuard:
    return RequestGuard.for_api(api.post, clock)


@pytest.mark.parametrize(
    ("header", "status", "reason"),
    [
        pytest.param("", 401, "a bearer token is required", id="no-header"),
        pytest.param("Basic dTpw", 401, "a bearer token is required", id="not-bearer"),
        pytest.param("Bearer ", 401, "a bearer token is required", id="empty-token"),
        pytest.param("Bearer stolen", 401, "unauthorized", id="refused-token"),
        pytest.param(
            "Bearer nobody",
            403,
            'user "system:serviceaccount:mon:nobody" may not get path "/metrics"',
            id="no-rbac",
        ),
        pytest.param("bearer scraper", 200, "", id="allowed"),
    ],
)
async def test_verdicts(header: str, status: int, reason: str) -> None:
    decision = await guard(Apiserver(), FakeClock(NOW))(header, "/metrics")
    assert (decision.status, decision.reason) == (status, reason)


async def test_the_review_asks_for_the_user_as_the_apiserver_named_it() -> None:
    api = Apiserver()
    await guard(api, FakeClock(NOW))("Bearer scraper", "/metrics")
    (tr_path, tr), (sar_path, sar) = api.calls
    # no audience: a scraper's token is one for the apiserver
    assert tr_path == TOKEN_PATH and tr["spec"] == {"token": "scraper"}
    assert sar_path == SAR_PATH and sar["kind"] == "SubjectAccessReview"
    assert sar["spec"] == {
        "user": "system:serviceaccount:mon:scraper",
        "uid": "u-scraper",
        "groups": ["system:serviceaccounts"],
        "extra": {"x": ["1"]},
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }


async def test_verdicts_are_cached_for_their_times() -> None:
    api, clock = Apiserver(), FakeClock(NOW)
    g = guard(api, clock)
    for _ in range(5):
        assert (await g("Bearer scraper", "/metrics")).status == 200
        assert (await g("Bearer nobody", "/metrics")).status == 403
    assert api.count(TOKEN_PATH) == 2 and api.count(SAR_PATH) == 2
    # the token verdicts run out first; the access ones are asked again only when due
    clock.advance(TOKEN_TTL + 1)
    await g("Bearer scraper", "/metrics")
    assert api.count(TOKEN_PATH) == 3 and api.count(SAR_PATH) == 2
    clock.advance(DENY_TTL - TOKEN_TTL)  # the denial is DENY_TTL + 1 old
    await g("Bearer nobody", "/metrics")
    assert api.count(SAR_PATH) == 3
    clock.advance(ALLOW_TTL - DENY_TTL)
    await g("Bearer scraper", "/metrics")
    assert api.count(SAR_PATH) == 4
    # another path is another question
    assert (await g("Bearer scraper", "/debug/queue")).status == 403
    assert api.count(SAR_PATH) == 5


async def test_an_apiserver_that_cannot_be_asked_is_503_and_caches_nothing() -> None:
    api, clock = Apiserver(), FakeClock(NOW)
    g = guard(api, clock)
    api.down = True
    decision = await g("Bearer scraper", "/metrics")
    assert (decision.status, decision.reason) == (503, "the request cannot be reviewed now")
    api.down = False
    assert (await g("Bearer scraper", "/metrics")).status == 200
    # the token was reviewed after all, and its access asked once it could be
    api.down = True
    clock.advance(TOKEN_TTL + 1)
    assert (await g("Bearer scraper", "/metrics")).status == 503


async def test_concurrent_first_scrapes_share_one_review() -> None:
    api = Apiserver()
    api.gate = anyio.Event()
    g = guard(api, FakeClock(NOW))
    results: list[int] = []

    async def scrape() -> None:
        results.append((await g("Bearer scraper", "/metrics")).status)

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(scrape)
        await anyio.wait_all_tasks_blocked()
        api.gate.set()
    assert results == [200] * 10
    assert api.count(TOKEN_PATH) == 1 and api.count(SAR_PATH) == 1


async def test_a_denial_is_cached_as_a_denial() -> None:
    api = Apiserver()
    reviewer = AccessReviewer(api.post, FakeClock(NOW))
    caller = Caller(username="system:serviceaccount:mon:nobody")
    assert await reviewer.allowed(caller, "/metrics") is False
    assert await reviewer.allowed(caller, "/metrics") is False
    assert reviewer.asked == 1


@pytest.mark.parametrize(
    ("value", "token"),
    [("Bearer abc", "abc"), ("BEARER  abc ", "abc"), ("Bearer", ""), ("Token abc", "")],
)
def test_bearer(value: str, token: str) -> None:
    assert bearer(value) == token


def test_an_overlong_token_is_no_token() -> None:
    assert bearer("Bearer " + "a" * 16385) == ""
