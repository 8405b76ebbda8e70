from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from controller import errors
from controller.client.api import ClientSettings, KubeApi
from controller.client.kube import LEASES, NAMESPACES, PODS, ResourceClient, _checked_events


@pytest.mark.parametrize(
    ("status", "reason", "cls", "retryable"),
    [
        pytest.param(400, "BadRequest", errors.BadRequest, False, id="400"),
        pytest.param(401, "Unauthorized", errors.Unauthorized, False, id="401"),
        pytest.param(403, "Forbidden", errors.Forbidden, False, id="403"),
        pytest.param(404, "NotFound", errors.NotFound, False, id="404"),
        pytest.param(409, "AlreadyExists", errors.AlreadyExists, False, id="409-exists"),
        pytest.param(409, "Conflict", errors.Conflict, False, id="409-conflict"),
        pytest.param(410, "Expired", errors.Gone, False, id="410"),
        pytest.param(422, "Invalid", errors.Invalid, False, id="422"),
        pytest.param(429, "TooManyRequests", errors.TooManyRequests, True, id="429"),
        pytest.param(500, "InternalError", errors.ServerError, True, id="500"),
        pytest.param(504, "Timeout", errors.ServerError, True, id="504"),
        pytest.param(418, "", errors.ApiError, False, id="other"),
    ],
)
def test_error_from_status(status: int, reason: str, cls: type, retryable: bool) -> None:
    err = errors.error_from_status(status, {"reason": reason, "message": "m", "details": {"x": 1}})
    assert type(err) is cls
    assert (err.status, err.reason, err.message) == (status, reason, "m")
    assert err.details == {"x": 1}
    assert errors.is_retryable(err) is retryable


def test_already_exists_is_a_conflict() -> None:
    assert isinstance(errors.error_from_status(409, {"reason": "AlreadyExists"}), errors.Conflict)


def test_connection_failed_is_retryable() -> None:
    err = errors.ConnectionFailed("refused")
    assert err.status == 0 and errors.is_retryable(err)


def client(resource: Any) -> ResourceClient:
    api = KubeApi.__new__(KubeApi)  # paths only: no configuration or session needed
    return ResourceClient(api, resource)


@pytest.mark.parametrize(
    ("resource", "args", "path"),
    [
        pytest.param(PODS, ("ns", None, None), "/api/v1/namespaces/ns/pods", id="core-collection"),
        pytest.param(PODS, (None, None, None), "/api/v1/pods", id="all-namespaces"),
        pytest.param(PODS, ("ns", "p", "status"), "/api/v1/namespaces/ns/pods/p/status", id="sub"),
        pytest.param(
            LEASES,
            ("kube-system", "l", None),
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l",
            id="group",
        ),
        pytest.param(
            NAMESPACES, ("ignored", "n", None), "/api/v1/namespaces/n", id="cluster-scoped"
        ),
    ],
)
def test_paths(resource: Any, args: tuple[Any, Any, Any], path: str) -> None:
    assert client(resource).path(*args) == path


async def _lines(*events: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    for e in events:
        yield e


async def test_watch_error_event_raises_its_status() -> None:
    events = _checked_events(
        _lines(
            {"type": "ADDED", "object": {"metadata": {"name": "a"}}},
            {
                "type": "ERROR",
                "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "old"},
            },
        )
    )
    assert (await anext(events))["type"] == "ADDED"
    with pytest.raises(errors.Gone):
        await anext(events)


def test_client_settings_defaults_are_sane() -> None:
    s = ClientSettings()
    assert s.stream_read_timeout < s.request_timeout * 10
    assert s.qps > 0 and s.burst >= 1


class PagedApi:
    """Answers list GETs from scripted pages, recording each request's params."""

    def __init__(self, *pages: dict[str, Any]) -> None:
        self.pages = list(pages)
        self.params: list[dict[str, str]] = []

    async def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        assert (method, path) == ("GET", "/api/v1/namespaces/ns/pods")
        self.params.append(kw["params"])
        return self.pages.pop(0)


async def test_list_follows_continue_tokens_and_keeps_first_rv() -> None:
    api = PagedApi(
        {"metadata": {"resourceVersion": "10", "continue": "t1"}, "items": [{"n": 1}]},
        {"metadata": {"resourceVersion": "11", "continue": "t2"}, "items": [{"n": 2}]},
        {"metadata": {"resourceVersion": "12"}, "items": [{"n": 3}]},
    )
    pods = ResourceClient(api, PODS)  # type: ignore[arg-type]
    result = await pods.list("ns", label_selector="app=x", limit=1)
    assert result.items == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert result.resource_version == "10", "every page is served from the first's snapshot"
    assert api.params == [
        {"labelSelector": "app=x", "limit": "1"},
        {"labelSelector": "app=x", "limit": "1", "continue": "t1"},
        {"labelSelector": "app=x", "limit": "1", "continue": "t2"},
    ]
