from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.kube import ControllerProcess, Kube
from tests.conftest import Cluster

#: Seconds a job's creates may be refused before it fails (120 by default).
FAILED_CREATE_GRACE = 3

BACKOFF_FLAGS = (
    "--restart-backoff-base=0.5",
    "--restart-backoff-max=2",
    f"--failed-create-grace={FAILED_CREATE_GRACE}",
)


@pytest.fixture(scope="session")
def controller(cluster: Cluster) -> Iterator[ControllerProcess]:
    """One tfjob-controller process for the session, watching every namespace.

    The replacement backoff is shortened (0.5 s * 2^n, capped at 2 s) so retry tests take
    well under a second per retry; nothing else depends on the 10 s default."""
    c = ControllerProcess(cluster, *BACKOFF_FLAGS)
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="session")
def kube(cluster: Cluster) -> Kube:
    return Kube(cluster)
