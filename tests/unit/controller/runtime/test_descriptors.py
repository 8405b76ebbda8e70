"""The descriptor limit raised as Go raises it, and the servers' caps cut to fit."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from controller.runtime.descriptors import DEFAULT_RESERVE, connection_caps

WANTED = {"health": 256, "metrics": 256, "progress": 4096}


def test_a_roomy_limit_keeps_every_cap() -> None:
    assert connection_caps(1 << 20, WANTED, first=("health",)) == WANTED


@pytest.mark.parametrize("limit", [1024, 600, 256, 64])
def test_a_tight_limit_keeps_the_probes_and_the_reserve(limit: int) -> None:
    # at 1,024 the reports' 4,096 took every descriptor: /healthz failed 12 of 16 checks
    caps = connection_caps(limit, WANTED, first=("health",))
    room = max(0, limit - DEFAULT_RESERVE)
    assert caps["health"] == max(1, min(256, room))
    if room >= 256 + 2:
        assert sum(caps.values()) <= room
    assert caps["progress"] >= caps["metrics"] >= 1
    assert set(caps) == set(WANTED)


def test_an_unused_server_takes_nothing() -> None:
    caps = connection_caps(1024, {**WANTED, "progress": 0}, first=("health",))
    assert caps["metrics"] == 256 and caps["progress"] == 1


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    code = (
        "import resource\n"
        "from controller.runtime.descriptors import raise_soft_limit\n"
        "got = raise_soft_limit()\n"
        "print(got, *resource.getrlimit(resource.RLIMIT_NOFILE))\n"
    )
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    soft = min(1024, hard)

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    out = subprocess.run(
        [sys.executable, "-c", code], preexec_fn=lower, capture_output=True, text=True, check=True
    ).stdout.split()
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    assert [int(x) for x in out] == [want, want, hard]
