from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.cluster import command, node
from tests.cluster.kube import ControllerProcess, Kube
from tests.cluster.lease_stage import Stage
from tests.cluster.progress_endpoint import progress_endpoint
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
    well under a second per retry; nothing else depends on the 10 s default. The
    training-progress endpoint is on (tests/cluster/progress_endpoint.py)."""
    endpoint = progress_endpoint(cluster)
    c = ControllerProcess(cluster, *BACKOFF_FLAGS, *endpoint.flags)
    c.progress = endpoint
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="session")
def kube(cluster: Cluster) -> Kube:
    return Kube(cluster)


@pytest.fixture(scope="session")
def real_node(cluster: Cluster) -> str:
    """The name of the real node (containerd, runc, kubelet, cluster DNS), added to the
    session's cluster by `hack/cluster.sh up --real-node` and kept until `down`. Pods
    run there only with its label and toleration (hack.cluster.node: NODE_LABELS,
    REAL_NODE_TAINT). A machine where it cannot run fails the test, with the reason."""
    if os.geteuid() != 0:
        pytest.fail("the real node needs root (containers, mounts, network namespaces)")
    proc = subprocess.run(
        command("up", "--real-node"), cwd=node.REPO, capture_output=True, text=True
    )
    if proc.returncode != 0:
        pytest.fail(f"the real node did not come up:\n{proc.stderr[-6000:]}", pytrace=False)
    return node.NODE_NAME


@pytest.fixture(scope="session")
def tf_node(real_node: str, cluster: Cluster) -> str:
    """The real node with the TensorFlow image imported (`up --tf-image`: built by
    hack/build-tf-image.sh when its cache entry is missing, about a minute cold, then
    ~45 s to import). Only the real-TensorFlow tests (marker tf, `make e2e-tf`) ask for it."""
    proc = subprocess.run(
        command("up", "--real-node", "--tf-image"), cwd=node.REPO, capture_output=True, text=True
    )
    if proc.returncode != 0:
        pytest.fail(
            f"the TensorFlow image is not on the node:\n{proc.stderr[-6000:]}", pytrace=False
        )
    return real_node


@pytest.fixture
def host_dir(namespace: str) -> Iterator[Path]:
    """A directory on the real node's host for this test's jobs to mount (hostPath,
    DirectoryOrCreate): what all pods of a job share, such as a training backup or
    checkpoints. Removed after the test."""
    d = Path("/var/tmp/tfjob-e2e") / namespace
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def stage(
    cluster: Cluster, controller: ControllerProcess, kube: Kube, namespace: str, tmp_path: Path
) -> Iterator[Stage]:
    s = Stage(
        cluster, kube, namespace, f"tfjob-controller-lease-test-{uuid.uuid4().hex[:8]}", tmp_path
    )
    controller.stop()
    try:
        yield s
    finally:
        controller.start()
        if kube.req("GET", s.lease_path) is not None:
            kube.req("DELETE", s.lease_path)


@pytest.fixture(scope="session")
def ops_tools() -> Path:
    """The directory holding helm and promtool (hack/build-ops-tools.sh: built from their
    Go modules when the cache entry is missing, `make ops-tools`)."""
    proc = subprocess.run(
        ["bash", str(node.REPO / "hack" / "build-ops-tools.sh")],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.fail(f"helm and promtool could not be built:\n{proc.stderr[-4000:]}", pytrace=False)
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def controller_image(real_node: str) -> str:
    """The controller's image, built from the working tree and imported into the real
    node's containerd (`up --controller-image`: hack/build-controller-image.sh, cached by
    its inputs, about 10 s when the code changed)."""
    proc = subprocess.run(
        command("up", "--real-node", "--controller-image"),
        cwd=node.REPO,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"the controller's image is not on the node:\n{proc.stderr[-6000:]}", pytrace=False
        )
    return node.CONTROLLER_IMAGE
