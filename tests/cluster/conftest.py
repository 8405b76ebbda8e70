from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.kube import ControllerProcess, Kube
from tests.conftest import Cluster


@pytest.fixture(scope="session")
def controller(cluster: Cluster) -> Iterator[ControllerProcess]:
    """One tfjob-controller process for the session, watching every namespace."""
    c = ControllerProcess(cluster)
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="session")
def kube(cluster: Cluster) -> Kube:
    return Kube(cluster)
