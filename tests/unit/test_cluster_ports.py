"""The local cluster's port choice (hack/cluster): ports below the ephemeral range, never
one handed out twice by a process, and a start that lost a port to another process
recognised as such (``up`` then starts again on other ports)."""

from __future__ import annotations

import argparse
import os
import socket
from pathlib import Path
from typing import Any

from hack.cluster import cli, host


def test_free_ports_are_below_the_ephemeral_range_and_never_repeat() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [host.free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports), "a port was handed out twice"
    assert all(1024 <= p < min(low, 32768) for p in ports)


def test_a_port_someone_listens_on_is_not_chosen() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        assert taken not in {host.free_port() for _ in range(300)}


def test_a_start_that_lost_a_port_is_told_from_other_failures(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "kube-apiserver.log").write_text("E0101 flag parse error\n")
    assert not cli._port_clash(tmp_path)
    (logs / "etcd.log").write_text(
        '{"level":"fatal","msg":"discovery failed","error":"listen tcp 127.0.0.1:30659: '
        'bind: address already in use"}\n'
    )
    assert cli._port_clash(tmp_path)
    assert not cli._port_clash(tmp_path / "missing")


class _Nodes:
    """The node API of a cluster whose kwok makes every applied node Ready."""

    def __init__(self, existing: int) -> None:
        self.nodes = {f"kwok-node-{i}" for i in range(existing)}
        self.applied: list[str] = []

    def apply(self, obj: dict[str, Any], collection: str) -> None:
        assert collection == "/api/v1/nodes"
        self.applied.append(obj["metadata"]["name"])
        self.nodes.add(obj["metadata"]["name"])

    def request(self, method: str, path: str) -> tuple[int, dict[str, Any]]:
        ready = [{"type": "Ready", "status": "True"}]
        items = [{"metadata": {"name": n}, "status": {"conditions": ready}} for n in self.nodes]
        return 200, {"items": items}


def test_a_reused_cluster_gets_the_nodes_a_bigger_run_needs() -> None:
    """``up`` on a running cluster made with fewer nodes adds the missing ones (a bench
    at 800 jobs on a cluster started for 100 had room for half its pods)."""
    opts = argparse.Namespace(
        nodes=6, node_cpu="8", node_memory="32Gi", node_gpu="8", node_pods="110"
    )
    api = _Nodes(existing=2)
    cli.kwok_nodes(api, opts, os.getpid())  # type: ignore[arg-type]
    assert api.nodes == {f"kwok-node-{i}" for i in range(6)}
