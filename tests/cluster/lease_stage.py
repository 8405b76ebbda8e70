"""The stage the lease tests play on (test_lease_fencing.py, test_lease_latency.py; the
``stage`` fixture in conftest.py sets it up): the test's namespace, a Lease of its own
(so a run that died holding one delays no other), replicas that see only that
namespace, optionally behind a fault proxy, and no session controller beside them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.cluster.faultproxy import Fault, FaultProxy
from tests.cluster.kube import ControllerProcess, Kube
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
