"""The commands: up, down, status, restart and compact."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hack.cluster import __doc__ as package_doc
from hack.cluster import gang, node
from hack.cluster.api import Api
from hack.cluster.components import (
    COMPONENT_PORTS,
    COMPONENTS,
    CONTROLLER_BIN,
    HEALTH_SCHEME,
    build_binaries,
    cluster_components,
    component_argv,
    node_manifest,
    start,
)
from hack.cluster.crds import install_crds, install_volcano_crd
from hack.cluster.host import (
    REPO,
    cluster_dir,
    free_port,
    http_ok,
    listening_ports,
    log,
    pid_alive,
    stop_process,
    wait_for,
)
from hack.cluster.pki import make_pki, write_kubeconfig
from hack.cluster.state import load_state, save_state, status_report

DEFAULT_AUDIT_POLICY = REPO / "hack" / "audit-policy.yaml"


def _argv(name: str, d: Path, state: dict[str, Any], opts: argparse.Namespace) -> list[str]:
    """component_argv, with the audit policy the cluster was started with."""
    argv = component_argv(name, d, state, opts)
    policy = f"--audit-policy-file={Path(opts.audit_policy).resolve()}"
    return [policy if a.startswith("--audit-policy-file=") else a for a in argv]


def _start(d: Path, name: str, state: dict[str, Any], opts: argparse.Namespace) -> int:
    env = node.env(state) if name in node.COMPONENTS else None
    return start(d, name, _argv(name, d, state, opts), env)


def _launcher(d: Path, state: dict[str, Any], opts: argparse.Namespace) -> Callable[[str], int]:
    """launch(name): start a component and record its PID in the saved state."""

    def launch(name: str) -> int:
        pid = _start(d, name, state, opts)
        state["pids"][name] = pid
        save_state(d, state)
        log(f"started {name} (pid {pid})")
        return pid

    return launch


def _add_real_node(d: Path, state: dict[str, Any], opts: argparse.Namespace, api: Api) -> None:
    t0 = time.monotonic()
    if "real_node" not in state:
        node.prepare(state)
        save_state(d, state)
    # Components whose command line depends on the real node (KCM), or that an older
    # `up` started otherwise (kwok on every node would take this one over; an apiserver
    # calling kubelets by name), are started again with today's.
    _audit_from_state(opts, state)
    for name in ("kube-apiserver", "kube-controller-manager", "kwok"):
        pid = state["pids"].get(name)
        try:
            running = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
        except (OSError, TypeError):
            running = []
        if running != _argv(name, d, state, opts):
            _restart_component(d, state, name, opts)
            if name == "kube-controller-manager":
                _wait_healthy(name, state, state["pids"][name])
    node.start(d, state, api, _launcher(d, state, opts))
    save_state(d, state)
    log(f"real node {node.NODE_NAME} Ready in {time.monotonic() - t0:.1f}s")


def _audit_from_state(opts: argparse.Namespace, state: dict[str, Any]) -> None:
    """A restarted apiserver keeps the audit settings of `up`, whatever restart's flags."""
    audit = state.get("audit")
    if audit is not None:
        opts.audit, opts.audit_policy = audit["on"], audit["policy"]


def _gang_crds(state: dict[str, Any]) -> list[Path]:
    """The CRDs the cluster's gang scheduler needs (before it and KCM start)."""
    if state.get("gang") != gang.COMPONENT:
        return []
    return [gang.pod_group_crd_file(Path(state["scheduler_plugins_bin"]))]


def _wait_healthy(name: str, state: dict[str, Any], pid: int) -> None:
    port = state["ports"][COMPONENT_PORTS[name][0]]
    url = f"{HEALTH_SCHEME.get(name, 'https')}://127.0.0.1:{port}/healthz"
    wait_for(name, lambda: http_ok(url), 60, [pid])


def _add_gang(d: Path, state: dict[str, Any], opts: argparse.Namespace, api: Api) -> None:
    """Give a running cluster the gang scheduler: the PodGroup CRD, KCM restarted (its
    garbage collector would otherwise see the new resource only at its next 30 s
    discovery resync), then the scheduler and its PodGroup controller."""
    _, sp_bin, ctrl_bin = build_binaries(with_gang=True)
    state["gang"] = gang.COMPONENT
    state["scheduler_plugins_bin"] = str(sp_bin)
    state["ports"]["scheduler_plugins"] = free_port()
    save_state(d, state)
    install_crds(api, _gang_crds(state))
    _restart_component(d, state, "kube-controller-manager", opts)
    pid = _start(d, gang.COMPONENT, state, opts)
    state["pids"][gang.COMPONENT] = pid
    save_state(d, state)
    _wait_healthy(gang.COMPONENT, state, pid)
    log(f"added {gang.COMPONENT} (pid {pid}) to the running cluster")
    _add_gang_controller(d, state, opts, ctrl_bin)


def _add_gang_controller(
    d: Path, state: dict[str, Any], opts: argparse.Namespace, binary: Path | None = None
) -> None:
    """Start the PodGroup controller in a running gang cluster that lacks it (one
    started before it was part of the gang lane, or by _add_gang)."""
    if binary is None:
        _, _, binary = build_binaries(with_gang=True)
    state[CONTROLLER_BIN] = str(binary)
    state["ports"]["scheduler_plugins_controller"] = free_port()
    save_state(d, state)
    pid = _start(d, gang.CONTROLLER, state, opts)
    state["pids"][gang.CONTROLLER] = pid
    save_state(d, state)
    _wait_healthy(gang.CONTROLLER, state, pid)
    log(f"added {gang.CONTROLLER} (pid {pid}) to the running cluster")


def kwok_nodes(api: Api, opts: argparse.Namespace, kwok_pid: int) -> None:
    """Make sure ``opts.nodes`` kwok nodes exist and are Ready (applying is idempotent:
    a running cluster reused for a bigger run gets the nodes it lacks)."""
    manifests = [node_manifest(i, opts) for i in range(opts.nodes)]
    for manifest in manifests:
        api.apply(manifest, "/api/v1/nodes")
    names = {m["metadata"]["name"] for m in manifests}

    def nodes_ready() -> bool:
        status, body = api.request("GET", "/api/v1/nodes")
        if status != 200:
            return False
        ready = {
            n["metadata"]["name"]
            for n in body["items"]
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (n.get("status") or {}).get("conditions") or []
            )
        }
        return names <= ready

    wait_for(f"{opts.nodes} kwok nodes Ready", nodes_ready, 60, [kwok_pid])


#: how many times ``up`` starts a new cluster when a chosen port was taken meanwhile
PORT_CLASH_ATTEMPTS = 3


def cmd_up(opts: argparse.Namespace) -> int:
    t0 = time.monotonic()
    d = cluster_dir()
    want_gang = opts.gang == gang.COMPONENT
    state = load_state(d)
    if state:
        ok, _ = status_report(d)
        if ok:
            api = Api(d, state["ports"]["apiserver"])
            if want_gang and state.get("gang") != gang.COMPONENT:
                _add_gang(d, state, opts, api)  # installs the CRDs too
            else:
                install_crds(api, _gang_crds(state))
                if state.get("gang") == gang.COMPONENT and CONTROLLER_BIN not in state:
                    _add_gang_controller(d, state, opts)
            if opts.volcano_crd:
                install_volcano_crd(api)
            if opts.real_node and "real_node" not in state:
                _add_real_node(d, state, opts, api)
            if opts.tf_image:
                node.add_tf_image(d, state)
            if opts.controller_image:
                node.add_controller_image(d, state)
            kwok_nodes(api, opts, state["pids"]["kwok"])
            log(f"reusing the running cluster in {d}")
            print(d / "kubeconfig")
            return 0
        log("found a stale cluster; stopping its leftovers")
        cmd_down(opts)
    # The ports are free when chosen, not reserved: another process may bind one before
    # our component does. Such a clash is not the cluster's fault; start again elsewhere.
    for attempt in range(1, PORT_CLASH_ATTEMPTS + 1):
        rc = _start_new(opts, d, want_gang, t0)
        if rc == 0 or attempt == PORT_CLASH_ATTEMPTS or not _port_clash(d):
            return rc
        log(f"a port was taken before its component bound it; starting again (try {attempt + 1})")
    return rc


def _port_clash(d: Path) -> bool:
    logs = d / "logs"
    return logs.is_dir() and any(
        "address already in use" in f.read_text(errors="replace") for f in logs.glob("*.log")
    )


def _start_new(opts: argparse.Namespace, d: Path, want_gang: bool, t0: float) -> int:
    bins, sp_bin, ctrl_bin = build_binaries(with_gang=want_gang)
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    make_pki(d / "pki", [node.node_ip()])
    port_names = ["etcd", "etcd_peer", "apiserver", "kcm", "scheduler"]
    if want_gang:
        port_names += ["scheduler_plugins", "scheduler_plugins_controller"]
    ports = {k: free_port() for k in port_names}
    write_kubeconfig(d, ports["apiserver"])
    state = {
        "pids": {},
        "ports": ports,
        "bin_dir": str(bins),
        "started": time.time(),
        "audit": {"on": opts.audit, "policy": str(Path(opts.audit_policy).resolve())},
    }
    if want_gang:
        state["gang"] = gang.COMPONENT
        state["scheduler_plugins_bin"] = str(sp_bin)
        state[CONTROLLER_BIN] = str(ctrl_bin)
    if opts.real_node:
        node.prepare(state)
    save_state(d, state)
    launch = _launcher(d, state, opts)
    try:
        pid = launch("etcd")
        wait_for("etcd", lambda: http_ok(f"http://127.0.0.1:{ports['etcd']}/health"), 60, [pid])
        pid = launch("kube-apiserver")
        api = Api(d, ports["apiserver"])
        wait_for("kube-apiserver /readyz", api.ready, 120, [pid])
        # CRDs before KCM: the garbage collector re-reads discovery only every 30 s.
        # The PodGroup CRD also goes before the gang scheduler, which reads PodGroups.
        install_crds(api, _gang_crds(state))
        if opts.volcano_crd:
            install_volcano_crd(api)
        for name in cluster_components(state):
            if name in ("kube-controller-manager", "kube-scheduler", *gang.COMPONENTS):
                _wait_healthy(name, state, launch(name))
        pid = launch("kwok")
        kwok_nodes(api, opts, pid)

        def default_ns() -> bool:
            return api.request("GET", "/api/v1/namespaces/default")[0] == 200

        wait_for("namespace default", default_ns, 30)
        if opts.real_node:
            _add_real_node(d, state, opts, api)
        if opts.tf_image:
            node.add_tf_image(d, state)
        if opts.controller_image:
            node.add_controller_image(d, state)
    except Exception as e:
        import traceback

        traceback.print_exc()
        log(f"cluster failed to start: {e}")
        for name in reversed(COMPONENTS):
            logf = d / "logs" / f"{name}.log"
            if logf.exists():
                tail = logf.read_text(errors="replace").splitlines()[-15:]
                log(f"--- last lines of {name}.log ---\n" + "\n".join(tail))
        cmd_down(opts, keep_logs=True)
        return 1
    log(f"cluster up in {time.monotonic() - t0:.1f}s; kubeconfig: {d / 'kubeconfig'}")
    print(d / "kubeconfig")
    return 0


def cmd_down(opts: argparse.Namespace, keep_logs: bool = False) -> int:
    d = cluster_dir()
    state = load_state(d)
    if not state:
        log(f"no cluster state in {d}; nothing to stop")
        return 0
    if getattr(opts, "real_node", False):
        return _remove_real_node(d, state)
    if "real_node" in state:
        node.stop(d, state)
    pids = [state["pids"][n] for n in reversed(COMPONENTS) if n in state["pids"]]
    # One at a time, in reverse start order: kube-apiserver shuts down quickly only
    # while etcd is still there to answer it.
    for pid in pids:
        stop_process(pid)
    ports = set(state.get("ports", {}).values())
    deadline = time.monotonic() + 10
    while ports & listening_ports() and time.monotonic() < deadline:
        time.sleep(0.05)
    if keep_logs:
        (d / "state.json").unlink(missing_ok=True)
    else:
        shutil.rmtree(d, ignore_errors=True)
    log(f"stopped {len(pids)} processes" + ("" if keep_logs else f" and removed {d}"))
    return 0


def _remove_real_node(d: Path, state: dict[str, Any]) -> int:
    """`down --real-node`: the real node alone goes; the control plane keeps running."""
    if "real_node" not in state:
        log("no real node in this cluster")
        return 0
    node.stop(d, state)
    for name in node.COMPONENTS:
        state["pids"].pop(name, None)
    for port in node.PORTS:
        state["ports"].pop(port, None)
    del state["real_node"]
    save_state(d, state)
    status, _ = Api(d, state["ports"]["apiserver"]).request(
        "DELETE", f"/api/v1/nodes/{node.NODE_NAME}"
    )
    left = node.leftovers(d)
    log(f"removed the real node (Node object: HTTP {status}); left behind: {left or 'nothing'}")
    return 1 if left else 0


def cmd_restart(opts: argparse.Namespace) -> int:
    """Kill one component (SIGKILL, like a crash) and start it again with the same flags."""
    d = cluster_dir()
    state = load_state(d)
    if not state:
        raise SystemExit("no cluster running")
    if opts.component not in cluster_components(state):
        raise SystemExit(f"{opts.component} is not part of this cluster (see --gang)")
    _audit_from_state(opts, state)
    _restart_component(d, state, opts.component, opts)
    return 0


def _restart_component(d: Path, state: dict[str, Any], name: str, opts: argparse.Namespace) -> None:
    pid = state["pids"].get(name)
    if pid and pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
        while pid_alive(pid):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.05)
    # A killed Go process can show as a zombie while its other threads still hold its
    # sockets: wait until nothing listens on the component's ports any more.
    ports = {state["ports"][k] for k in COMPONENT_PORTS.get(name, [])}
    wait_for(f"{name}'s ports to close", lambda: not ports & listening_ports(), 30)
    new = _start(d, name, state, opts)
    state["pids"][name] = new
    save_state(d, state)
    if name == "kube-apiserver":
        wait_for("kube-apiserver /readyz", Api(d, state["ports"]["apiserver"]).ready, 120, [new])
    log(f"restarted {name} (pid {new})")


def cmd_compact(opts: argparse.Namespace) -> int:
    """Compact etcd to its current revision: every older resourceVersion then gives 410."""
    state = load_state(cluster_dir())
    if not state:
        raise SystemExit("no cluster running")
    base = f"http://127.0.0.1:{state['ports']['etcd']}"

    def post(path: str, body: dict[str, Any]) -> Any:
        req = urllib.request.Request(
            base + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    rev = int(post("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
    post("/v3/kv/compaction", {"revision": rev, "physical": True})
    log(f"compacted etcd at revision {rev}")
    print(rev)
    return 0


def cmd_status(opts: argparse.Namespace) -> int:
    ok, lines = status_report(cluster_dir())
    print("\n".join(lines))
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    summary = (package_doc or "").split("\n")[0]
    p = argparse.ArgumentParser(prog="hack/cluster.sh", description=summary)
    p.add_argument("command", choices=["up", "down", "status", "restart", "compact"])
    p.add_argument("component", nargs="?", choices=COMPONENTS, help="for restart")
    p.add_argument("--nodes", type=int, default=int(os.environ.get("TFJOB_CLUSTER_NODES", 4)))
    p.add_argument("--node-cpu", default="8")
    p.add_argument("--node-memory", default="32Gi")
    p.add_argument("--node-gpu", default="8")
    p.add_argument("--node-pods", default="110")
    p.add_argument(
        "--kwok-cidr",
        default="10.244.0.0/16",
        help="the kwok pods' addresses (bench-flood gives them loopback ones, which its"
        " simulated pods can send from)",
    )
    p.add_argument(
        "--audit",
        action="store_true",
        default=os.environ.get("TFJOB_CLUSTER_AUDIT") == "1",
        help="write an apiserver audit log at Metadata level (for benchmarks)",
    )
    p.add_argument(
        "--audit-policy",
        default=str(DEFAULT_AUDIT_POLICY),
        help="the audit policy file for --audit (default hack/audit-policy.yaml)",
    )
    p.add_argument(
        "--gang",
        choices=["none", *gang.GANG_SCHEDULERS],
        default="none",
        help="also run a gang scheduler: scheduler-plugins' Coscheduling as a second "
        f"scheduler (schedulerName {gang.SCHEDULER_NAME}), with its PodGroup CRD and "
        "PodGroup controller",
    )
    p.add_argument(
        "--volcano-crd",
        action="store_true",
        help="install the Volcano PodGroup CRD (hack/crds/volcano-podgroups.yaml)",
    )
    p.add_argument(
        "--real-node",
        action="store_true",
        help=f"up: also run a real node ({node.NODE_NAME}: containerd, runc, kubelet, "
        "CoreDNS; root); down: remove only the real node",
    )
    p.add_argument(
        "--tf-image",
        action="store_true",
        help="up: the real node with the TensorFlow image built (hack/build-tf-image.sh) "
        f"and imported ({node.TF_IMAGE})",
    )
    p.add_argument(
        "--controller-image",
        action="store_true",
        help="up: the real node with the controller's image built from the working tree "
        f"(hack/build-controller-image.sh) and imported ({node.CONTROLLER_IMAGE})",
    )
    opts = p.parse_args(argv)
    opts.real_node = opts.real_node or (
        opts.command == "up" and (opts.tf_image or opts.controller_image)
    )
    if opts.command == "restart" and not opts.component:
        p.error("restart needs a component")
    commands = {
        "up": cmd_up,
        "down": cmd_down,
        "status": cmd_status,
        "restart": cmd_restart,
        "compact": cmd_compact,
    }
    return commands[opts.command](opts)
