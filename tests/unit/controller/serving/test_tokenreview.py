"""TokenReview verdicts cached for the token's life; refusals briefly; errors never."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import anyio
import orjson
import pytest

from controller.clock import FakeClock
from controller.serving.limits import KeyedLimiter
from controller.serving.tokenreview import TokenReviewer, token_expiry
from controller.serving.verdicts import ReviewUnavailable

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def jwt(exp: float | None) -> str:
    claims = {"sub": "x"} if exp is None else {"exp": exp}
    body = base64.urlsafe_b64encode(orjson.dumps(claims)).rstrip(b"=").decode()
    return f"eyJhbGciOiJSUzI1NiJ9.{body}.sig"


class Api:
    def __init__(self) -> None:
        self.calls: list[Mapping[str, Any]] = []
        self.fail = False
        self.gate: anyio.Event | None = None

    async def post(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        self.calls.append(body)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise OSError("no route")
        ok = body["spec"]["token"] != "bad"
        user = {"username": "u", "uid": "1", "groups": ["g"], "extra": {"k": ["v"]}}
        status = {"authenticated": ok, "user": user, "error": "" if ok else "nope"}
        return {"status": status | {"audiences": body["spec"].get("audiences", [])}}


def reviewer(api: Api, clock: FakeClock) -> TokenReviewer:
    return TokenReviewer(api.post, clock, max_ttl=600, negative_ttl=10)


async def test_accepted_for_the_tokens_life_and_no_longer() -> None:
    clock, api = FakeClock(NOW), Api()
    r = reviewer(api, clock)
    token = jwt(NOW.timestamp() + 120)
    v = await r.review(token, "aud")
    assert v.caller is not None and v.caller.extra == {"k": ("v",)} and v.caller.groups == ("g",)
    assert api.calls[0]["spec"] == {"token": token, "audiences": ["aud"]}
    clock.advance(119)
    await r.review(token, "aud")
    assert len(api.calls) == 1 and r.counts["hit"] == 1
    clock.advance(2)
    await r.review(token, "aud")
    assert len(api.calls) == 2
    # another audience is another question
    await r.review(token, "other")
    assert len(api.calls) == 3


async def test_capped_by_max_ttl_and_refusals_cached_briefly() -> None:
    clock, api = FakeClock(NOW), Api()
    r = reviewer(api, clock)
    await r.review(jwt(None), "aud")
    clock.advance(601)
    await r.review(jwt(None), "aud")
    assert len(api.calls) == 2
    v = await r.review("bad", "aud")
    assert v.caller is None and v.reason == "nope"
    clock.advance(9)
    await r.review("bad", "aud")
    assert len(api.calls) == 3
    clock.advance(2)
    await r.review("bad", "aud")
    assert len(api.calls) == 4


async def test_an_error_is_no_verdict() -> None:
    clock, api = FakeClock(NOW), Api()
    r = reviewer(api, clock)
    api.fail = True
    with pytest.raises(ReviewUnavailable):
        await r.review("t", "aud")
    api.fail = False
    assert (await r.review("t", "aud")).caller is not None
    assert r.counts == {
        "hit": 0,
        "accepted": 1,
        "refused": 0,
        "error": 1,
        "local": 0,
        "over_budget": 0,
    }


async def test_concurrent_first_reports_share_one_review() -> None:
    clock, api = FakeClock(NOW), Api()
    r = reviewer(api, clock)
    api.gate = anyio.Event()
    results: list[object] = []

    async def one() -> None:
        results.append((await r.review("t", "aud")).caller)

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(one)
        await anyio.wait_all_tasks_blocked()
        api.gate.set()
    assert len(api.calls) == 1 and len(results) == 5 and all(results)


def test_expiry_is_read_from_the_claims_only_when_well_formed() -> None:
    assert token_expiry(jwt(123.0)) == 123.0
    assert token_expiry(jwt(None)) is None
    assert token_expiry("a.b") is None
    assert token_expiry("a.!!!.c") is None
    assert token_expiry("a." + base64.urlsafe_b64encode(b'{"exp": "1"}').decode() + ".c") is None


def test_keyed_limits() -> None:
    clock = FakeClock(NOW)
    lim = KeyedLimiter(clock, rate=2, burst=2, max_keys=4)
    assert [lim.take("a") for _ in range(3)] == [0.0, 0.0, 0.5]
    assert lim.take("b") == 0.0
    clock.advance(0.5)
    assert lim.take("a") == 0.0
    for k in "cdefgh":
        lim.take(k)
    assert len(lim) <= 4  # refilled buckets are forgotten
    with pytest.raises(ValueError):
        KeyedLimiter(clock, rate=0, burst=1)
