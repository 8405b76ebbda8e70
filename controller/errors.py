"""Kubernetes API errors, classified once from the HTTP status.

Contract: every failed API call made through controller.client.api raises an ``ApiError``
subclass carrying ``status``, ``reason`` and ``message`` from the apiserver's Status
body. Callers branch on the class, never on numbers:

- ``NotFound`` (404), ``AlreadyExists`` (409, reason AlreadyExists), ``Conflict``
  (409, any other reason: a stale resourceVersion or a failed precondition),
  ``Gone`` (410, the resourceVersion is too old: relist), ``Invalid`` (422),
  ``Forbidden`` (403), ``Unauthorized`` (401), ``BadRequest`` (400);
- ``Retryable`` for anything a retry may fix: ``TooManyRequests`` (429),
  ``ServerError`` (5xx) and ``ConnectionFailed`` (no HTTP response at all: refused,
  reset, DNS, client-side timeout).

This module has no I/O dependencies so reconcile/ may import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ApiError(Exception):
    """A failed Kubernetes API call."""

    status: int
    reason: str
    message: str
    details: Mapping[str, Any]

    def __init__(
        self,
        status: int,
        reason: str = "",
        message: str = "",
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{status} {reason}: {message}" if reason else f"{status}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.details = details or {}


class BadRequest(ApiError):
    pass


class Unauthorized(ApiError):
    pass


class Forbidden(ApiError):
    pass


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    """409: optimistic-concurrency or precondition failure; re-read and retry."""


class AlreadyExists(Conflict):
    """409 AlreadyExists. A Conflict subclass because both mean "someone else wrote
    first", but callers creating deterministic names usually treat it as success."""


class Gone(ApiError):
    """410: the requested resourceVersion is no longer available; relist."""


class Invalid(ApiError):
    """422: the object failed validation. Retrying the same write cannot help."""


class Retryable(ApiError):
    """A failure a later retry may not hit: throttling, server or transport trouble."""


class TooManyRequests(Retryable):
    pass


class ServerError(Retryable):
    pass


class ConnectionFailed(Retryable):
    """No usable HTTP response (status 0): connect error, reset, or client timeout."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "ConnectionFailed", message)


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def error_from_status(status: int, body: Mapping[str, Any] | None = None) -> ApiError:
    """Build the error for an HTTP status and an optional decoded Status body."""
    body = body or {}
    reason = str(body.get("reason") or "")
    message = str(body.get("message") or "")
    details = body.get("details")
    details = details if isinstance(details, Mapping) else {}
    cls: type[ApiError]
    if status == 409 and reason == "AlreadyExists":
        cls = AlreadyExists
    elif status in _BY_STATUS:
        cls = _BY_STATUS[status]
    elif status >= 500:
        cls = ServerError
    else:
        cls = ApiError
    return cls(status, reason, message, details)


def is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, Retryable)


def is_namespace_terminating(exc: BaseException) -> bool:
    """A create refused because its namespace is being deleted: everything in it,
    the would-be owner included, is about to go."""
    if not isinstance(exc, Forbidden):
        return False
    causes = exc.details.get("causes")
    return isinstance(causes, list) and any(
        isinstance(c, Mapping) and c.get("reason") == "NamespaceTerminating" for c in causes
    )


def is_permanent(exc: BaseException) -> bool:
    """The request itself is refused (400, 403, 404, 422): sending it again unchanged
    will not help until someone changes the spec, a quota, a policy or the RBAC. 401,
    409, 410, 429, 5xx and connection failures are not (credentials rotate, conflicts
    and overload pass)."""
    return isinstance(exc, BadRequest | Forbidden | NotFound | Invalid) and not (
        is_namespace_terminating(exc)
    )
