"""state.json: the PIDs and ports of a running cluster, written atomically, and the
status report read from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hack.cluster import gang
from hack.cluster.api import Api
from hack.cluster.components import cluster_components
from hack.cluster.host import pid_alive


def load_state(d: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads((d / "state.json").read_text()))
    except (OSError, ValueError):
        return None


def save_state(d: Path, state: dict[str, Any]) -> None:
    tmp = d / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(d / "state.json")


def status_report(d: Path) -> tuple[bool, list[str]]:
    state = load_state(d)
    if not state:
        return False, [f"no cluster in {d}"]
    lines, all_up = [], True
    for name in cluster_components(state):
        pid = state["pids"].get(name)
        alive = bool(pid) and pid_alive(pid)
        all_up &= alive
        lines.append(f"{name:28s} pid {pid}  {'running' if alive else 'STOPPED'}")
    api = Api(d, state["ports"]["apiserver"])
    ready = api.ready()
    all_up &= ready
    lines.append(f"apiserver https://127.0.0.1:{state['ports']['apiserver']} ready={ready}")
    if state.get("gang") == gang.COMPONENT:
        lines.append(
            f"gang scheduler {gang.SCHEDULER_NAME} "
            f"(permitWaitingTimeSeconds {gang.PERMIT_WAITING_TIME_SECONDS})"
        )
    lines.append(f"kubeconfig {d / 'kubeconfig'}")
    return all_up, lines
