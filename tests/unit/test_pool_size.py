"""The request pool's size follows the client-side rate limit (app.pool_size_for)."""

from __future__ import annotations

import pytest

from controller.client.api import ClientSettings
from tfjob_controller.app import MIN_LIMITED_POOL, client_settings, parse_args, pool_size_for


def test_without_a_rate_limit_the_pool_keeps_its_default() -> None:
    assert pool_size_for(0, 30) == ClientSettings().pool_size
    assert pool_size_for(-1, 500) == ClientSettings().pool_size


@pytest.mark.parametrize(
    ("qps", "burst", "size"),
    [(20, 30, 30), (5, 5, MIN_LIMITED_POOL), (50, 40, 40), (500, 1000, 50)],
)
def test_under_a_rate_limit_the_pool_is_the_burst(qps: float, burst: int, size: int) -> None:
    assert pool_size_for(qps, burst) == size


def test_the_controllers_client_gets_the_size_for_its_flags() -> None:
    _, limited = client_settings(parse_args([]))  # 20/30 by default
    assert limited.pool_size == 30
    _, unlimited = client_settings(parse_args(["--kube-api-qps", "0"]))
    assert unlimited.pool_size == ClientSettings().pool_size
