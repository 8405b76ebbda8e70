"""A tiny process competing for a Lease, for the leader-election cluster tests.

    python -m tests.cluster.leader_demo --kubeconfig K --namespace N --name L --identity I

Runs the real Manager with a LeaseElector and one idle controller, logging JSON to
stderr. Exit status is the Manager's: 0 after SIGTERM (lease released), 1 when the
lease is lost.
"""

from __future__ import annotations

import argparse
import sys

import anyio

from controller.client.api import KubeApi
from controller.client.kube import LEASES, ResourceClient
from controller.observability.logging import configure_logging
from controller.runtime.controller import Controller
from controller.runtime.leader import LeaseElector
from controller.runtime.manager import Manager
from controller.types import Result


class Idle:
    async def reconcile(self, key: str) -> Result:
        return Result()


async def run(args: argparse.Namespace) -> int:
    async with await KubeApi.from_kubeconfig(args.kubeconfig) as api:
        elector = LeaseElector(
            ResourceClient(api, LEASES),
            namespace=args.namespace,
            name=args.name,
            identity=args.identity,
        )
        manager = Manager(controllers=[Controller("idle", Idle())], elector=elector)
        return await manager.run()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--identity", required=True)
    args = p.parse_args()
    configure_logging("json", "info")
    sys.exit(anyio.run(run, args))


if __name__ == "__main__":
    main()
