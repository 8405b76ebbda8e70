"""Bearer tokens reviewed by the apiserver (TokenReview), cached for their lifetime.

A report is authenticated by asking the apiserver: ``POST tokenreviews`` with the token
and the audience it must carry. The answer is cached (controller.serving.verdicts) by
(sha256 of the token, audience) until the token expires (its ``exp`` claim, read only
after the apiserver accepted it), at most ``max_ttl``, so a pod reporting every few
seconds costs one review per token rotation, not one per report. A refusal is cached
for ``negative_ttl``: a client retrying a bad token does not turn each retry into an API
call.

What a cached acceptance cannot see is a token revoked early: a bound token dies with
its pod, and the caller of this module checks that pod against its own cache.

Reviews in flight are bounded (``max_in_flight``), and one token's concurrent first
reports share one review. An API error is not a verdict: nothing is cached and the
caller answers 503, so the client retries.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson

from controller.serving.limits import Budget
from controller.serving.verdicts import (
    DEFAULT_MAX_ENTRIES,
    DEFAULT_MAX_IN_FLIGHT,
    OverBudget,
    ReviewUnavailable,
    VerdictCache,
)
from controller.types import Caller, Clock

REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
#: the kubelet rotates a projected token at 80% of its life (an hour by default)
DEFAULT_MAX_TTL = 600.0
DEFAULT_NEGATIVE_TTL = 10.0

Post = Callable[[str, Mapping[str, Any]], Awaitable[Mapping[str, Any]]]


@dataclass(frozen=True, slots=True)
class Verdict:
    caller: Caller | None  # None: refused
    reason: str = ""


class TokenReviewer:
    def __init__(
        self,
        post: Post,
        clock: Clock,
        *,
        max_ttl: float = DEFAULT_MAX_TTL,
        negative_ttl: float = DEFAULT_NEGATIVE_TTL,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        budget: Budget | None = None,
    ) -> None:
        """``post(path, body)`` sends a request to the apiserver and returns its JSON
        answer, raising on failure. ``budget``: the process's reviews a second, shared
        with its other reviewers (controller.serving.verdicts)."""
        self._post = post
        self._clock = clock
        self.max_ttl = max_ttl
        self.negative_ttl = negative_ttl
        self._verdicts = VerdictCache[tuple[bytes, str], Verdict](
            clock,
            max_entries=max_entries,
            max_in_flight=max_in_flight,
            refused=lambda v: v.caller is None,
            budget=budget,
        )
        #: what the reviews cost: "hit", "accepted", "refused", "error"
        #: local: refused here, unreviewed, from the token's own claims (the server's
        #: count); over_budget: a review the process's budget could not spare
        self.counts: dict[str, int] = {
            "hit": 0,
            "accepted": 0,
            "refused": 0,
            "error": 0,
            "local": 0,
            "over_budget": 0,
        }

    def __len__(self) -> int:
        return len(self._verdicts)

    async def review(self, token: str, audience: str) -> Verdict:
        """The apiserver's verdict on ``token`` for ``audience`` (empty: the apiserver's
        own audiences, as a token a client got for talking to the apiserver has), cached."""
        key = (hashlib.sha256(token.encode()).digest(), audience)
        try:
            verdict = await self._verdicts.get(key, partial(self._ask, token, audience))
        except OverBudget:
            self.counts["over_budget"] += 1
            raise
        self.counts["hit"] = self._verdicts.hits
        return verdict

    async def _ask(self, token: str, audience: str) -> tuple[Verdict, float]:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, **({"audiences": [audience]} if audience else {})},
        }
        try:
            answer = await self._post(REVIEW_PATH, body)
        except Exception as e:
            self.counts["error"] += 1
            raise ReviewUnavailable(f"{type(e).__name__}: {e}") from e
        status = answer.get("status")
        status = status if isinstance(status, Mapping) else {}
        if status.get("authenticated") is not True:
            self.counts["refused"] += 1
            reason = status.get("error") or "the apiserver did not authenticate the token"
            return Verdict(None, str(reason)[:300]), self.negative_ttl
        audiences = status.get("audiences")
        # an answer that lists no audiences has not said the token is for ours
        if audience and not (isinstance(audiences, list) and audience in audiences):
            self.counts["refused"] += 1
            return Verdict(None, f"the token is not for audience {audience}"), self.negative_ttl
        self.counts["accepted"] += 1
        caller = _caller(status.get("user"))
        return Verdict(caller), self._ttl(token)

    def _ttl(self, token: str) -> float:
        exp = token_expiry(token)
        if exp is None:
            return self.max_ttl
        left = exp - self._clock.now().timestamp()
        return max(0.0, min(self.max_ttl, left))


def _caller(user: object) -> Caller:
    user = user if isinstance(user, Mapping) else {}
    extra_in = user.get("extra")
    extra: dict[str, tuple[str, ...]] = {}
    if isinstance(extra_in, Mapping):
        for k, v in extra_in.items():
            if isinstance(k, str) and isinstance(v, list):
                extra[k] = tuple(str(x) for x in v)
    groups = user.get("groups")
    return Caller(
        username=str(user.get("username") or ""),
        uid=str(user.get("uid") or ""),
        groups=tuple(str(g) for g in groups) if isinstance(groups, list) else (),
        extra=extra,
    )


@dataclass(frozen=True, slots=True)
class Claims:
    """What a projected service-account token says of itself, unverified: enough to
    refuse, before any review, what cannot be a token for the audience asked, never
    enough to accept."""

    audiences: tuple[str, ...]
    expiry: float | None
    not_before: float | None
    pod_name: str
    pod_uid: str
    issued_at: float | None = None


def unverified_claims(token: str) -> Claims | None:
    """The claims of a JWT-shaped token, or None when it is not one (three base64url
    parts, the first two JSON objects)."""
    parts = token.split(".")
    if len(parts) != 3 or not all(parts):
        return None
    try:
        header = orjson.loads(base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)))
        claims = orjson.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        return None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        return None
    aud = claims.get("aud")
    if isinstance(aud, str):
        audiences: tuple[str, ...] = (aud,)
    else:
        audiences = tuple(a for a in aud if isinstance(a, str)) if isinstance(aud, list) else ()
    kube = claims.get("kubernetes.io")
    pod = kube.get("pod") if isinstance(kube, dict) else None
    pod = pod if isinstance(pod, dict) else {}
    return Claims(
        audiences=audiences,
        expiry=_number(claims.get("exp")),
        not_before=_number(claims.get("nbf")),
        pod_name=str(pod.get("name") or ""),
        pod_uid=str(pod.get("uid") or ""),
        issued_at=_number(claims.get("iat")),
    )


#: clock skew allowed between the apiserver that issued a token and this process
SKEW_SECONDS = 60.0


def implausible(claims: Claims | None, audience: str, now: float) -> str | None:
    """Why a token with ``claims`` cannot be a projected pod token for ``audience`` at
    ``now`` (POSIX seconds), or None: the reason a review would refuse it anyway."""
    if claims is None:
        return "not a JWT"
    if audience not in claims.audiences:
        return "not for this audience"
    if claims.expiry is None or claims.expiry + SKEW_SECONDS <= now:
        return "expired"
    if claims.not_before is not None and claims.not_before - SKEW_SECONDS > now:
        return "not valid yet"
    if not claims.pod_name or not claims.pod_uid:
        return "not bound to a pod"
    return None


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def token_expiry(token: str) -> float | None:
    """The ``exp`` claim (POSIX seconds) of a JWT, unverified: read only once the
    apiserver has verified the token, to know how long its verdict holds."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = orjson.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, orjson.JSONDecodeError):
        return None
    return _number(claims.get("exp")) if isinstance(claims, dict) else None
