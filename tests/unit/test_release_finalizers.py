"""``tfjob-controller release-finalizers`` against a recording pods client: which pods it
lets go of, with which patch, and what it says and returns when a release fails."""

from __future__ import annotations

from typing import Any

import pytest

from controller import errors
from controller.client.kube import ListResult
from reconcile.api.names import TRACKING_FINALIZER
from tfjob_controller.release import parse_args, release_all, stop_deployment

OTHER = "other.test/keep"


def pod(name: str, *finalizers: str, ns: str = "a") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "uid": f"u-{name}",
                         "finalizers": list(finalizers)}}  # fmt: skip


class Pods:
    def __init__(self, items: list[dict[str, Any]], fail: dict[str, Exception]) -> None:
        self.items, self.fail = items, fail
        self.patched: list[tuple[str, Any, str]] = []
        self.listed: list[str | None] = []

    async def list(self, namespace: str | None = None, **kw: Any) -> ListResult:
        self.listed.append(namespace)
        return ListResult(self.items, "1")

    async def patch(self, namespace: str, name: str, body: Any, *, content_type: str) -> Any:
        if name in self.fail:
            raise self.fail[name]
        self.patched.append((name, body, content_type))
        return {}


async def test_only_our_finalizer_comes_off_and_only_pods_that_carry_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pods = Pods(
        [pod("ours", TRACKING_FINALIZER), pod("both", OTHER, TRACKING_FINALIZER),
         pod("foreign", OTHER), pod("bare"), pod("gone", TRACKING_FINALIZER)],
        {"gone": errors.NotFound(404, "NotFound", "gone")},
    )  # fmt: skip
    assert await release_all(pods, "a", dry_run=False) == 0  # type: ignore[arg-type]
    assert pods.listed == ["a"]
    assert sorted(name for name, _, _ in pods.patched) == ["both", "ours"]
    for name, body, ctype in pods.patched:
        assert ctype == "application/strategic-merge-patch+json"
        # the one entry deleted from the list, the UID as a precondition: no other
        # finalizer is named, so none can be lost
        assert body == {"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER],
                                     "uid": f"u-{name}"}}  # fmt: skip
    out = capsys.readouterr().out
    assert "gone already: a/gone" in out
    assert out.strip().endswith("2 of 3 tracked pods released (namespace a); 0 failed")


async def test_a_failed_release_is_said_and_fails_the_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pods = Pods([pod("x", TRACKING_FINALIZER), pod("y", TRACKING_FINALIZER)],
                {"x": errors.Forbidden(403, "Forbidden", "no")})  # fmt: skip
    assert await release_all(pods, None, dry_run=False) == 1  # type: ignore[arg-type]
    captured = capsys.readouterr()
    assert "FAILED a/x" in captured.err
    assert "1 of 2 tracked pods released (all namespaces); 1 failed" in captured.out


async def test_a_dry_run_writes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    pods = Pods([pod("x", TRACKING_FINALIZER), pod("z", OTHER)], {})
    assert await release_all(pods, None, dry_run=True) == 0  # type: ignore[arg-type]
    assert pods.patched == []
    assert "would release a/x" in capsys.readouterr().out


class Api:
    """Answers the Deployment's GET and scale PATCH; the pods go after ``polls`` lists."""

    def __init__(self, exists: bool = True) -> None:
        self.exists = exists
        self.calls: list[tuple[str, str, Any]] = []

    async def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        self.calls.append((method, path, kw.get("body")))
        if not self.exists:
            raise errors.NotFound(404, "NotFound", "deployments.apps not found")
        if method == "GET":
            labels = {"app.kubernetes.io/name": "tfjob-controller"}
            return {"spec": {"selector": {"matchLabels": labels}}}
        return {}


class DrainingPods(Pods):
    def __init__(self, polls: int) -> None:
        super().__init__([], {})
        self.polls = polls
        self.selectors: list[str | None] = []

    async def list(self, namespace: str | None = None, **kw: Any) -> ListResult:
        self.selectors.append(kw.get("label_selector"))
        self.polls -= 1
        return ListResult([pod("controller-x")] if self.polls > 0 else [], "1")


async def test_stop_deployment_scales_to_zero_and_waits_for_its_pods(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def no_wait(_: float) -> None:
        return None

    monkeypatch.setattr("tfjob_controller.release.anyio.sleep", no_wait)
    api, pods = Api(), DrainingPods(polls=3)
    assert await stop_deployment(api, pods, "ops", "tfjob-controller", 60) is True  # type: ignore[arg-type]
    path = "/apis/apps/v1/namespaces/ops/deployments/tfjob-controller"
    assert api.calls == [("GET", path, None), ("PATCH", f"{path}/scale", {"spec": {"replicas": 0}})]
    # waited on the Deployment's own selector until no pod of it was left
    assert pods.selectors == ["app.kubernetes.io/name=tfjob-controller"] * 3
    assert "deployment ops/tfjob-controller stopped" in capsys.readouterr().out


async def test_a_deployment_that_is_not_there_is_stopped_already() -> None:
    pods = DrainingPods(polls=0)
    assert await stop_deployment(Api(exists=False), pods, "ops", "x", 60) is True  # type: ignore[arg-type]
    assert pods.selectors == []


async def test_pods_that_do_not_go_fail_the_stop(capsys: pytest.CaptureFixture[str]) -> None:
    pods = DrainingPods(polls=10**9)
    assert await stop_deployment(Api(), pods, "ops", "x", 0.05) is False  # type: ignore[arg-type]
    assert "pods still there after 0.05 s" in capsys.readouterr().err


def test_stop_deployment_takes_namespace_and_name() -> None:
    assert parse_args(["--stop-deployment", "ops/tfjob-controller"]).stop_deployment == (
        "ops/tfjob-controller"
    )
    for bad in ("ops", "/x", "ops/", "a/b/c"):
        with pytest.raises(SystemExit):
            parse_args(["--stop-deployment", bad])
