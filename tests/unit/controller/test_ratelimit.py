from __future__ import annotations

import pytest

from controller.clock import FakeClock
from controller.ratelimit import (
    BucketRateLimiter,
    ItemExponentialRateLimiter,
    MaxOfRateLimiter,
    TokenBucket,
    default_controller_rate_limiter,
)


@pytest.mark.parametrize(
    ("base", "cap", "calls", "expected"),
    [
        pytest.param(0.005, 1000.0, 4, [0.005, 0.01, 0.02, 0.04], id="doubles-from-base"),
        pytest.param(1.0, 3.0, 4, [1.0, 2.0, 3.0, 3.0], id="capped-at-max"),
    ],
)
def test_item_exponential(base: float, cap: float, calls: int, expected: list[float]) -> None:
    limiter = ItemExponentialRateLimiter[str](base, cap)
    assert [limiter.when("a") for _ in range(calls)] == pytest.approx(expected)
    assert limiter.num_requeues("a") == calls
    assert limiter.when("b") == pytest.approx(base), "items are tracked separately"
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == pytest.approx(base)


def test_item_exponential_survives_huge_failure_counts() -> None:
    limiter = ItemExponentialRateLimiter[str](0.005, 1000.0)
    delays = [limiter.when("x") for _ in range(5000)]
    assert delays[-1] == 1000.0
    assert max(delays) == 1000.0


def test_token_bucket_burst_then_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)
    clock.advance(1.0)  # repays the debt of 2 and refills 3 (capped at burst)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]


def test_token_bucket_disabled_when_qps_not_positive() -> None:
    bucket = TokenBucket(qps=0, burst=1, clock=FakeClock())
    assert not bucket.enabled
    assert {bucket.reserve() for _ in range(1000)} == {0.0}


def test_bucket_limiter_is_global_not_per_item() -> None:
    limiter = BucketRateLimiter[str](qps=1, burst=1, clock=FakeClock())
    assert limiter.when("a") == 0.0
    assert limiter.when("b") == pytest.approx(1.0)
    assert limiter.num_requeues("a") == 0


def test_max_of_takes_longest_and_fans_out_forget() -> None:
    clock = FakeClock()
    limiter = MaxOfRateLimiter[str](
        ItemExponentialRateLimiter[str](1.0, 100.0), BucketRateLimiter[str](1, 1, clock)
    )
    assert limiter.when("a") == pytest.approx(1.0)  # per-item wins over a full bucket
    assert limiter.when("b") == pytest.approx(1.0)  # bucket debt equals per-item base
    assert limiter.when("a") == pytest.approx(2.0)
    assert limiter.num_requeues("a") == 2
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0


def test_default_controller_limiter_shape() -> None:
    limiter = default_controller_rate_limiter(FakeClock())
    # burst of 100 is free, so the per-item delay rules the first retries
    assert [limiter.when("k") for _ in range(3)] == pytest.approx([0.005, 0.01, 0.02])
    for i in range(200):
        limiter.when(f"other-{i}")
    # the bucket is now in debt: a fresh item waits on the global rate, not its own
    assert limiter.when("fresh") > 1.0
