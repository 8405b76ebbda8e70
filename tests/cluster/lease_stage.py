"""The stage the lease tests play on (test_lease_fencing.py, test_lease_latency.py; the
``stage`` fixture in conftest.py sets it up): the test's namespace, a Lease of its own
(so a run that died holding one delays no other), replicas that see only that
namespace, optionally behind a fault proxy, and no session controller beside them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.cluster.faultproxy import Fault, FaultProxy
from tests.cluster.kube import ControllerProcess, Kube
from tests.cluster.policy_helpers import leading
from tests.conftest import Cluster


@dataclass
class Stage:
    """Where each test here runs: its namespace, a Lease of its own (so a run that died
    holding one delays no other), and no session controller acting beside its replicas."""

    cluster: Cluster
    kube: Kube
    namespace: str
    lease: str
    workdir: Path

    @property
    def lease_path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{self.lease}"

    @contextmanager
    def proxy(self, fault: Fault) -> Iterator[FaultProxy]:
        proxy = FaultProxy(self.cluster, self.workdir, fault)
        proxy.start()
        try:
            yield proxy
        finally:
            proxy.stop()

    def replica(
        self, identity: str, *extra: str, proxy: FaultProxy | None = None
    ) -> ControllerProcess:
        """A replica that sees only the test's namespace: jobs other tests leave behind
        (in namespaces being deleted) would add requests of their own to the record."""
        return ControllerProcess(
            self.cluster,
            f"--namespace={self.namespace}",
            "--leader-elect",
            "--leader-election-namespace=default",
            f"--leader-election-id={self.lease}",
            f"--leader-election-identity={identity}",
            *extra,
            kubeconfig=proxy.kubeconfig() if proxy is not None else None,
            log_name=f"tfjob-controller-{identity}",
        )


def handover(old: ControllerProcess, new: ControllerProcess) -> tuple[float, float]:
    """When ``old`` exited and when ``new`` led, watched in one loop so that neither time
    is late for having waited on the other."""
    exited_at = acquired_at = 0.0
    deadline = time.monotonic() + 45
    while not (exited_at and acquired_at):
        assert time.monotonic() < deadline, f"exited at {exited_at}, acquired at {acquired_at}"
        now = time.monotonic()
        if not exited_at and old.proc is not None and old.proc.poll() is not None:
            exited_at = now
        if not acquired_at and leading(new):
            acquired_at = now
        time.sleep(0.05)
    return exited_at, acquired_at
