"""The suite against an existing cluster (TFJOB_TEST_KUBECONFIG, what `make kind-e2e`
uses): a pytest run of its own, given only the local cluster's kubeconfig, runs the
tests that need nothing local and deselects those marked local_only."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.cluster.kube import ControllerProcess
from tests.conftest import REPO, Cluster

#: one module with nothing local, one test of a mixed module that needs kwok
SELECTION = [
    "tests/cluster/test_explain.py",
    "tests/cluster/test_hostile_input.py::test_zero_replica_chief_counts_as_absent_and_worker0_decides",
]


def test_an_existing_cluster_runs_what_needs_nothing_local(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    env = {**os.environ, "TFJOB_TEST_KUBECONFIG": cluster.kubeconfig}
    env.pop("TFJOB_CLUSTER_DIR", None)  # the run must not need the local cluster's dir
    # The run's own session controller is the only one: this session's, beside it, would
    # make some of its pods, with an endpoint of its own in them.
    controller.stop()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *SELECTION],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        controller.start()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    summary = re.search(r"\b(\d+) passed, 1 deselected\b", out)
    assert summary is not None and int(summary.group(1)) > 0, out[-3000:]
    assert "failed" not in out and "skipped" not in out, out[-3000:]
