from __future__ import annotations

from collections.abc import Callable

import pytest

from controller.clock import FakeClock
from controller.runtime.expectations import ControllerExpectations, rv_at_least

Step = Callable[[ControllerExpectations, FakeClock], None]
K = "ns/job"


@pytest.mark.parametrize(
    ("steps", "satisfied"),
    [
        pytest.param([], True, id="never-raised"),
        pytest.param([lambda e, c: e.expect_creations(K, 2)], False, id="creations-pending"),
        pytest.param(
            [
                lambda e, c: e.expect_creations(K, 2),
                lambda e, c: e.creation_observed(K),
                lambda e, c: e.creation_observed(K),
            ],
            True,
            id="creations-observed",
        ),
        pytest.param(
            [
                lambda e, c: e.expect_creations(K, 2),
                lambda e, c: e.creation_observed(K),  # one create failed: lowered by caller
                lambda e, c: e.creation_observed(K),  # the other observed by the informer
            ],
            True,
            id="lowered-on-failed-write",
        ),
        pytest.param(
            [
                lambda e, c: e.expect_creations(K, 1),
                lambda e, c: e.expect_creations(K, 1),
                lambda e, c: e.creation_observed(K),
            ],
            False,
            id="raises-are-additive",
        ),
        pytest.param(
            [lambda e, c: e.expect_creations(K, 1), lambda e, c: c.advance(300.0)],
            False,
            id="ttl-boundary-not-yet-expired",
        ),
        pytest.param(
            [lambda e, c: e.expect_creations(K, 1), lambda e, c: c.advance(300.1)],
            True,
            id="ttl-expired",
        ),
        pytest.param(
            [
                lambda e, c: e.expect_creations(K, 1),
                lambda e, c: c.advance(200),
                lambda e, c: e.expect_creations(K, 1),
                lambda e, c: c.advance(200),
            ],
            False,
            id="raise-restarts-ttl",
        ),
        pytest.param(
            [
                lambda e, c: e.expect_deletions(K, ["u1", "u2"]),
                lambda e, c: e.deletion_observed(K, "u1"),
            ],
            False,
            id="deletions-pending-by-uid",
        ),
        pytest.param(
            [
                lambda e, c: e.expect_deletions(K, ["u1", "u2"]),
                lambda e, c: e.deletion_observed(K, "u1"),
                lambda e, c: e.deletion_observed(K, "u1"),  # terminating, then gone: counted once
                lambda e, c: e.deletion_observed(K, "other"),  # unrelated pod
            ],
            False,
            id="same-uid-lowers-once",
        ),
        pytest.param(
            [
                lambda e, c: e.expect_deletions(K, ["u1", "u2"]),
                lambda e, c: e.deletion_observed(K, "u2"),
                lambda e, c: e.deletion_observed(K, "u1"),
            ],
            True,
            id="all-uids-observed",
        ),
        pytest.param(
            [lambda e, c: e.expect_creations(K, 1), lambda e, c: e.delete(K)],
            True,
            id="deleted-key",
        ),
        pytest.param(
            [lambda e, c: e.expect_creations("ns/other", 1)], True, id="keys-are-independent"
        ),
    ],
)
def test_counts_uids_and_ttl(steps: list[Step], satisfied: bool) -> None:
    clock = FakeClock()
    exp = ControllerExpectations(clock)
    for step in steps:
        step(exp, clock)
    assert exp.satisfied(K) is satisfied


@pytest.mark.parametrize(
    ("steps", "satisfied"),
    [
        pytest.param([lambda e, c: e.expect_resource_version(K, "100")], False, id="not-seen-yet"),
        pytest.param(
            [
                lambda e, c: e.expect_resource_version(K, "100"),
                lambda e, c: e.observe_resource_version(K, "99"),
            ],
            False,
            id="cache-older",
        ),
        pytest.param(
            [
                lambda e, c: e.expect_resource_version(K, "100"),
                lambda e, c: e.observe_resource_version(K, "100"),
            ],
            True,
            id="cache-caught-up",
        ),
        pytest.param(
            [
                lambda e, c: e.expect_resource_version(K, "100"),
                lambda e, c: e.observe_resource_version(K, "1000"),
            ],
            True,
            id="numeric-not-lexicographic",
        ),
        pytest.param(
            [
                lambda e, c: e.observe_resource_version(K, "105"),
                lambda e, c: e.expect_resource_version(K, "100"),
            ],
            True,
            id="event-raced-ahead-of-response",
        ),
        pytest.param(
            [
                lambda e, c: e.observe_resource_version(K, "105"),
                lambda e, c: e.observe_resource_version(K, "101"),  # older event never lowers
                lambda e, c: e.expect_resource_version(K, "103"),
            ],
            True,
            id="observed-rv-is-monotonic",
        ),
        pytest.param(
            [
                lambda e, c: e.expect_resource_version(K, "100"),
                lambda e, c: e.expect_resource_version(K, "90"),
                lambda e, c: e.observe_resource_version(K, "95"),
            ],
            False,
            id="expected-rv-keeps-highest",
        ),
        pytest.param(
            [
                lambda e, c: e.expect_resource_version(K, "abc"),
                lambda e, c: e.observe_resource_version(K, "abc"),
            ],
            True,
            id="opaque-equal",
        ),
        pytest.param(
            [
                lambda e, c: e.expect_resource_version(K, "abc"),
                lambda e, c: e.observe_resource_version(K, "abd"),
            ],
            False,
            id="opaque-different",
        ),
        pytest.param(
            [lambda e, c: e.expect_resource_version(K, "100"), lambda e, c: c.advance(301)],
            True,
            id="rv-gate-expires",
        ),
        pytest.param(
            [
                lambda e, c: e.expect_creations(K, 1),
                lambda e, c: e.expect_resource_version(K, "100"),
                lambda e, c: e.observe_resource_version(K, "100"),
            ],
            False,
            id="rv-seen-but-creation-pending",
        ),
    ],
)
def test_read_your_writes(steps: list[Step], satisfied: bool) -> None:
    clock = FakeClock()
    exp = ControllerExpectations(clock)
    for step in steps:
        step(exp, clock)
    assert exp.satisfied(K) is satisfied


def test_expired_record_is_replaced_not_extended() -> None:
    clock = FakeClock()
    exp = ControllerExpectations(clock)
    exp.expect_creations(K, 5)
    clock.advance(301)
    exp.expect_creations(K, 1)  # the 5 stale ones must not linger
    exp.creation_observed(K)
    assert exp.satisfied(K)
    assert exp.pending(K) == (0, frozenset(), None)


@pytest.mark.parametrize(
    ("observed", "expected", "ok"),
    [
        pytest.param(None, "1", False, id="none"),
        pytest.param("9", "10", False, id="int-less"),
        pytest.param("10", "9", True, id="int-greater"),
        pytest.param("x", "x", True, id="opaque-equal"),
        pytest.param("10", "x", False, id="mixed"),
    ],
)
def test_rv_at_least(observed: str | None, expected: str, ok: bool) -> None:
    assert rv_at_least(observed, expected) is ok
