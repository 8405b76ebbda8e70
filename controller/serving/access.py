"""Who may read an endpoint: the caller's bearer token reviewed (TokenReview), then
its right to ``get`` the path asked for (SubjectAccessReview on a non-resource URL).

This is what Kubebuilder's secure metrics do (controller-runtime's
``WithAuthenticationAndAuthorization``): a Prometheus scraping with its
ServiceAccount's token needs a ClusterRole granting ``get`` on ``/metrics``; anyone
else gets 401 (no token, or one the apiserver does not accept) or 403 (a token whose
user may not). Both verdicts are cached: a token's for a minute at most, an access
decision five minutes when allowed and thirty seconds when denied, as
controller-runtime caches them, so a scrape every few seconds costs no API call. When
the apiserver cannot be asked the answer is 503 and nothing is cached.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import structlog

from controller.serving.limits import Budget
from controller.serving.tokenreview import Post, TokenReviewer
from controller.serving.verdicts import ReviewUnavailable, VerdictCache
from controller.types import Caller, Clock

log = structlog.get_logger("controller.serving.access")

REVIEW_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
TOKEN_TTL = 60.0
ALLOW_TTL = 300.0
DENY_TTL = 30.0
#: a bearer token longer than this is not one the apiserver issues; it is not sent on
MAX_TOKEN = 16384


@dataclass(frozen=True, slots=True)
class Decision:
    status: int  # 200 allowed; 401, 403 or 503 refused
    reason: str = ""


#: (user, uid, groups, extra as sorted pairs, path, verb)
AccessKey = tuple[str, str, tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...], str, str]


class AccessReviewer:
    """SubjectAccessReviews for non-resource URLs, cached."""

    def __init__(
        self,
        post: Post,
        clock: Clock,
        *,
        allow_ttl: float = ALLOW_TTL,
        deny_ttl: float = DENY_TTL,
        budget: Budget | None = None,
    ) -> None:
        self._post = post
        self.allow_ttl = allow_ttl
        self.deny_ttl = deny_ttl
        self._verdicts = VerdictCache[AccessKey, bool](clock, budget=budget)
        self.asked = 0

    async def allowed(self, caller: Caller, path: str, verb: str = "get") -> bool:
        extra = tuple(sorted((k, tuple(v)) for k, v in caller.extra.items()))
        key: AccessKey = (caller.username, caller.uid, caller.groups, extra, path, verb)
        return await self._verdicts.get(key, partial(self._ask, caller, path, verb))

    async def _ask(self, caller: Caller, path: str, verb: str) -> tuple[bool, float]:
        spec: dict[str, Any] = {
            "user": caller.username,
            "groups": list(caller.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if caller.uid:
            spec["uid"] = caller.uid
        if caller.extra:
            spec["extra"] = {k: list(v) for k, v in caller.extra.items()}
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        self.asked += 1
        try:
            answer = await self._post(REVIEW_PATH, body)
        except Exception as e:
            raise ReviewUnavailable(f"{type(e).__name__}: {e}") from e
        status = answer.get("status")
        allowed = isinstance(status, Mapping) and status.get("allowed") is True
        return allowed, self.allow_ttl if allowed else self.deny_ttl


class RequestGuard:
    """``await guard(authorization, path)``: may the request with that Authorization
    header value read ``path``?"""

    def __init__(self, tokens: TokenReviewer, access: AccessReviewer) -> None:
        self.tokens = tokens
        self.access = access

    @classmethod
    def for_api(cls, post: Post, clock: Clock, budget: Budget | None = None) -> RequestGuard:
        """``budget``: the process's reviews a second, shared with its other reviewers."""
        return cls(
            TokenReviewer(post, clock, max_ttl=TOKEN_TTL, budget=budget),
            AccessReviewer(post, clock, budget=budget),
        )

    async def __call__(self, authorization: str, path: str) -> Decision:
        token = bearer(authorization)
        if not token:
            return Decision(401, "a bearer token is required")
        try:
            verdict = await self.tokens.review(token, "")
            if verdict.caller is None:
                log.debug("metrics token refused", reason=verdict.reason)
                return Decision(401, "unauthorized")
            if not await self.access.allowed(verdict.caller, path):
                user = verdict.caller.username[:200]
                return Decision(403, f'user "{user}" may not get path "{path[:200]}"')
        except ReviewUnavailable as e:
            log.warning("request review failed", path=path[:200], error=str(e))
            return Decision(503, "the request cannot be reviewed now")
        return Decision(200)


def bearer(value: str) -> str:
    """The token of an ``Authorization: Bearer <token>`` value, or ""."""
    scheme, _, token = value.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN:
        return ""
    return token
