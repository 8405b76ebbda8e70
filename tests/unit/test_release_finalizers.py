"""``tfjob-controller release-finalizers`` against a recording pods client: which pods it
lets go of, with which patch, and what it says and returns when a release fails."""

from __future__ import annotations

from typing import Any

import pytest

from controller import errors
from controller.client.kube import ListResult
from reconcile.api.names import TRACKING_FINALIZER
from tfjob_controller.release import release_all

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
