"""A real node beside the kwok nodes: containerd, runc and a real kubelet.

kwok simulates the kubelet, so nothing ever runs on its nodes. `up --real-node` adds one
node where pods run as real processes: containerd (its own root, state and socket under
<cluster>/node/), runc, Debian's CNI plugins on a bridge of our own, and kubelet from
the same Kubernetes module as the control plane, all built by hack/build-node.sh and
cached outside the repo. No registry is reachable, so the sandbox (pause) image and the
workload image (python3 on Debian minbase) are imported from OCI archives the build
made.

The node is tainted (REAL_NODE_TAINT) and labelled type=real, so only pods that ask for
it (tolerate the taint, select the label) land there; kwok manages only the nodes
annotated kwok.x-k8s.io/node=fake and leaves this one alone.

It needs root (containers, mounts, network namespaces) and cgroups: cgroup v1 works
(kubelet's failCgroupV1 is off, cgroupfs driver, no QoS cgroups). `down` stops kubelet,
removes every pod sandbox through CRI (so CNI releases its addresses and the network
namespaces go), stops containerd and any shim of ours still running, and unmounts what
is left under the node's directory.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

from hack.cluster.host import REPO, free_port, http_ok, log, pid_alive, stop_process, wait_for

NODE_NAME = "real-node-0"
CLUSTER_DOMAIN = "cluster.local"
#: What a pod needs to tolerate to run on the real node.
REAL_NODE_TAINT = {"key": "tfjob.local/real-node", "value": "true", "effect": "NoSchedule"}
NODE_LABELS = {"type": "real"}
#: The image the workload archive is tagged with (hack/build-node.sh: WORKLOAD_IMAGE).
WORKLOAD_IMAGE = "tfjob.local/python:bookworm"
SANDBOX_IMAGE = "registry.k8s.io/pause:3.10"
#: The TensorFlow image (hack/build-tf-image.sh: TF_IMAGE), imported only on request
#: (`up --tf-image`): 1.75 GB, for the real-TensorFlow tests and `make run-tf`.
TF_IMAGE = "tfjob.local/tensorflow:2.21.0-bookworm"
#: The controller's image (hack/build-controller-image.sh), imported on request
#: (`up --controller-image`): the controller deployed in the cluster, for the Helm tests.
CONTROLLER_IMAGE = "tfjob.local/tfjob-controller:dev"
#: The pods' bridge and its subnet: apart from kwok's 10.244.0.0/16 and the services'
#: 10.0.0.0/24.
BRIDGE = "tfjob-cni0"
POD_SUBNET = "10.89.0.0/24"
CNI_BIN_DIR = "/usr/lib/cni"
COMPONENTS = ["containerd", "coredns", "kubelet"]
#: its entries in the cluster state's ports
PORTS = ["kubelet", "kubelet_healthz", "coredns_ready"]
#: Unix socket paths are limited to 107 bytes; the shim's lives under the state dir.
_MAX_SOCKET_PATH = 100


def build() -> Path:
    """The node's bin directory (hack/build-node.sh builds what is missing)."""
    out = subprocess.run(
        ["bash", str(REPO / "hack" / "build-node.sh")],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def node_ip() -> str:
    """This host's address on its default route: kube-apiserver reaches kubelet there for
    logs and exec, and a node's InternalIP may not be a loopback address."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.255", 9))  # no packet is sent: this only picks a route
            ip = str(s.getsockname()[0])
        except OSError:
            ip = ""
    if ip and not ip.startswith("127."):
        return ip
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"], stdout=subprocess.PIPE, text=True
    ).stdout
    for line in out.splitlines():
        fields = line.split()
        if len(fields) > 3 and not fields[1].startswith(("docker", "cni", "tfjob-")):
            return fields[3].split("/")[0]
    raise RuntimeError("no non-loopback IPv4 address for the real node")


def paths(d: Path) -> dict[str, Path]:
    n = d / "node"
    return {
        "dir": n,
        "containerd_config": n / "containerd.toml",
        "containerd_root": n / "containerd" / "root",
        "containerd_state": n / "containerd" / "state",
        "socket": n / "containerd.sock",
        "cni_conf": n / "cni",
        "kubelet_root": n / "kubelet",
        "kubelet_config": n / "kubelet.yaml",
        "pod_logs": n / "pod-logs",
        "resolv": n / "resolv.conf",
        "corefile": n / "Corefile",
    }


def containerd_config(d: Path, bins: Path) -> str:
    p = paths(d)
    # TOML strings: JSON's quoting is valid TOML for these paths.
    q = json.dumps
    return f"""version = 3
root = {q(str(p["containerd_root"]))}
state = {q(str(p["containerd_state"]))}
[grpc]
  address = {q(str(p["socket"]))}
[ttrpc]
  address = {q(str(p["socket"]) + ".ttrpc")}
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = {q(SANDBOX_IMAGE)}
[plugins.'io.containerd.cri.v1.runtime']
  # Without it every sandbox fails where lowering oom_score_adj is forbidden.
  restrict_oom_score_adj = true
  # These set sysctls in each pod's namespace, which a confined host may refuse.
  enable_unprivileged_ports = false
  enable_unprivileged_icmp = false
  # Network namespaces under our state dir, not /var/run/netns: `down` sweeps them.
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = {q(str(bins / "runc"))}
        Root = {q(str(p["containerd_state"] / "runc"))}
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [{q(CNI_BIN_DIR)}]
    conf_dir = {q(str(p["cni_conf"]))}
    use_internal_loopback = true
"""


def cni_conflist() -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "tfjob-real-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                # the gateway address on the bridge: pods reach the host (and the DNS
                # server on it) through it
                "isGateway": True,
                # no NAT: pods talk to each other and to the host, not to the outside,
                # and no iptables rules of ours are left on the host
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": "",  # set by write_config
                },
            }
        ],
    }


def kubelet_config(d: Path, state: dict[str, Any]) -> dict[str, Any]:
    p = paths(d)
    ports = state["ports"]
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "0.0.0.0",
        "port": ports["kubelet"],
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports["kubelet_healthz"],
        # The apiserver calls it for logs and exec with its own client certificate;
        # anyone who can reach this port on the host is trusted, as on a test cluster.
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{p['socket']}",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        # No QoS or node-allocatable cgroups: they need a writable cgroup hierarchy of
        # the node's own; containers still get their limits from runc.
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "podLogsDir": str(p["pod_logs"]),
        "resolvConf": str(p["resolv"]),
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [state["real_node"]["ip"]],
        "registerWithTaints": [REAL_NODE_TAINT],
        "maxPods": 30,
        # Our images cannot be pulled again: never collect them, and no eviction for
        # a host disk that is merely fuller than a real node's would be.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "serializeImagePulls": False,
        # A crashing container is restarted after 1 s, not 10 s doubling to 5 min: the
        # tests of in-place restarts (OnFailure, backoffLimit) take seconds.
        "featureGates": {"KubeletCrashLoopBackOffMax": True},
        "crashLoopBackOff": {"maxContainerRestartPeriod": "1s"},
        "shutdownGracePeriod": "0s",
    }


def corefile(d: Path, state: dict[str, Any]) -> str:
    """Cluster DNS on the node's address (pods reach it through the bridge's gateway).
    No cache: a peer's name must resolve as soon as its pod has an address, and an
    answer cached from before would hide it."""
    return f"""\
.:53 {{
    bind {state["real_node"]["ip"]}
    ready 127.0.0.1:{state["ports"]["coredns_ready"]}
    errors
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {d / "kubeconfig"}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    forward . /etc/resolv.conf
}}
"""


def write_config(d: Path, state: dict[str, Any], bins: Path) -> None:
    p = paths(d)
    if len(str(p["socket"])) + len(".ttrpc") > _MAX_SOCKET_PATH:
        raise RuntimeError(f"cluster directory {d} is too long for containerd's socket path")
    for key in ("containerd_root", "containerd_state", "cni_conf", "kubelet_root", "pod_logs"):
        p[key].mkdir(parents=True, exist_ok=True)
    p["containerd_config"].write_text(containerd_config(d, bins))
    conf = cni_conflist()
    conf["plugins"][0]["ipam"]["dataDir"] = str(p["dir"] / "cni-ipam")
    (p["cni_conf"] / "10-tfjob.conflist").write_text(json.dumps(conf, indent=2))
    # Pods get the host's resolvers until cluster DNS is there.
    host_resolv = Path("/etc/resolv.conf")
    p["resolv"].write_text(host_resolv.read_text() if host_resolv.exists() else "")
    p["kubelet_config"].write_text(json.dumps(kubelet_config(d, state), indent=2))
    p["corefile"].write_text(corefile(d, state))


def argv(name: str, d: Path, state: dict[str, Any]) -> list[str]:
    p = paths(d)
    bins = Path(state["real_node"]["bin_dir"])
    if name == "containerd":
        return [str(bins / "containerd"), f"--config={p['containerd_config']}", "--log-level=warn"]
    if name == "coredns":
        return [str(bins / "coredns"), "-conf", str(p["corefile"])]
    if name == "kubelet":
        labels = ",".join(f"{k}={v}" for k, v in NODE_LABELS.items())
        return [
            str(bins / "kubelet"),
            f"--config={p['kubelet_config']}",
            f"--kubeconfig={d / 'kubeconfig'}",
            f"--root-dir={p['kubelet_root']}",
            f"--cert-dir={p['kubelet_root'] / 'pki'}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={state['real_node']['ip']}",
            f"--node-labels={labels}",
            "--v=1",
        ]
    raise ValueError(name)


def env(state: dict[str, Any]) -> dict[str, str]:
    """containerd finds its shim on PATH; runc and the CNI plugins are named in full."""
    bins = state["real_node"]["bin_dir"]
    return {**os.environ, "PATH": f"{bins}:{os.environ.get('PATH', '/usr/bin:/bin')}"}


def ctr(d: Path, state: dict[str, Any], *args: str, timeout: float = 300) -> str:
    bins = Path(state["real_node"]["bin_dir"])
    out = subprocess.run(
        [str(bins / "ctr"), f"--address={paths(d)['socket']}", "--namespace=k8s.io", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    if out.returncode != 0:
        raise RuntimeError(f"ctr {' '.join(args)}: {out.stdout.strip()[-2000:]}")
    return out.stdout


def import_images(d: Path, state: dict[str, Any]) -> None:
    images = Path(state["real_node"]["bin_dir"]).parent / "images"
    for archive, name in (("pause.tar", SANDBOX_IMAGE), ("workload.tar", WORKLOAD_IMAGE)):
        import_image(d, state, images / archive, name)


def import_image(d: Path, state: dict[str, Any], archive: Path, name: str) -> None:
    """Import ``archive`` into the node's containerd unless an image of ``name`` is
    there already. Large archives take a while (the TensorFlow image ~45 s)."""
    if name in ctr(d, state, "images", "ls", "-q").split():
        return
    t0 = time.monotonic()
    log(f"importing {name} from {archive.name} ({archive.stat().st_size >> 20} MB)")
    ctr(d, state, "images", "import", str(archive), timeout=900)
    log(f"imported {name} ({time.monotonic() - t0:.1f}s)")


def add_tf_image(d: Path, state: dict[str, Any]) -> None:
    """Build the TensorFlow image if its cache entry is missing (hack/build-tf-image.sh,
    progress on stderr), and import it into the running node."""
    out = subprocess.run(
        ["bash", str(REPO / "hack" / "build-tf-image.sh")],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    import_image(d, state, Path(out.stdout.strip().splitlines()[-1]), TF_IMAGE)


def add_controller_image(d: Path, state: dict[str, Any]) -> None:
    """Build the controller's image from the working tree (hack/build-controller-image.sh;
    cached by its inputs) and import it into the running node, replacing an older build
    under the same name."""
    out = subprocess.run(
        ["bash", str(REPO / "hack" / "build-controller-image.sh")],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    archive = Path(out.stdout.strip().splitlines()[-1])
    with tarfile.open(archive) as tar:
        index = tar.extractfile("index.json")
        assert index is not None
        digest = json.load(index)["manifests"][0]["digest"]
    for line in ctr(d, state, "images", "ls").splitlines()[1:]:
        ref, _kind, have, *_ = line.split()
        if ref == CONTROLLER_IMAGE and have == digest:
            return
    t0 = time.monotonic()
    ctr(d, state, "images", "import", str(archive), timeout=900)
    log(f"imported {CONTROLLER_IMAGE} {digest[:19]} ({time.monotonic() - t0:.1f}s)")


def crictl(d: Path, state: dict[str, Any], *args: str, timeout: float = 60) -> str | None:
    """crictl's output, or None when it failed (containerd not answering, say)."""
    bins = Path(state["real_node"]["bin_dir"])
    out = subprocess.run(
        [str(bins / "crictl"), f"--runtime-endpoint=unix://{paths(d)['socket']}", *args],
        capture_output=True,  # stderr: its warnings, kept out of the answer
        text=True,
        timeout=timeout,
    )
    return out.stdout if out.returncode == 0 else None


def our_shims(d: Path) -> list[int]:
    """PIDs of containerd shims started by our containerd (they name its socket)."""
    sock = str(paths(d)["socket"])
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"containerd-shim-runc-v2") and sock.encode() in cmd:
            pids.append(int(entry.name))
    return pids


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below root, deepest first."""
    prefix = str(root).rstrip("/") + "/"
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefix) or point == prefix.rstrip("/"):
                found.append(point)
    return sorted(found, key=lambda m: m.count("/"), reverse=True)


def stop(d: Path, state: dict[str, Any]) -> None:
    """Stop the real node and leave no process or mount of it behind."""
    node = state.get("real_node")
    pids = state.get("pids", {})
    if "kubelet" in pids:
        stop_process(pids["kubelet"])  # first: it would start the pods again
    if node and "containerd" in pids and pid_alive(pids["containerd"]):
        # Through CRI, so CNI releases each pod's address and its namespace is removed.
        if crictl(d, state, "rmp", "--all", "--force") is None:
            log("real node: crictl could not remove every pod sandbox")
    for name in ("containerd", "coredns"):
        if name in pids:
            stop_process(pids[name])
    for pid in our_shims(d):
        stop_process(pid, timeout=5)
    for point in mounts_under(paths(d)["dir"]):
        subprocess.run(["umount", "-l", point], check=False, stderr=subprocess.DEVNULL)
    # The bridge outlives its pods; a next `up` would reuse it, but `down` leaves nothing.
    subprocess.run(["ip", "link", "delete", BRIDGE], check=False, stderr=subprocess.DEVNULL)
    remove_bridge_forwarding()
    left = leftovers(d)
    if left:
        log(f"real node: left behind after stopping: {left}")
    # containerd's parent cgroup for the sandboxes, empty once they are gone
    for parent in Path("/sys/fs/cgroup").glob("*/k8s.io"):
        try:
            parent.rmdir()
        except OSError:
            pass


#: Pod-to-pod traffic crosses our bridge; where br_netfilter is loaded it also crosses
#: the host's FORWARD chain, whose policy Docker sets to DROP. This rule lets it through;
#: `down` deletes it.
_FORWARD_RULE = [
    "FORWARD",
    "-i",
    BRIDGE,
    "-o",
    BRIDGE,
    "-j",
    "ACCEPT",
    "-m",
    "comment",
    "--comment",
    "tfjob-controller local cluster real node",
]


def _iptables(*args: str) -> bool:
    if not shutil.which("iptables"):
        return False
    return subprocess.run(["iptables", "-w", *args], stderr=subprocess.DEVNULL).returncode == 0


def allow_bridge_forwarding() -> None:
    if shutil.which("iptables") and not _iptables("-C", *_FORWARD_RULE):
        if not _iptables("-I", *_FORWARD_RULE):
            log("real node: no FORWARD rule for its bridge; pods may not reach each other")


def remove_bridge_forwarding() -> None:
    for _ in range(10):
        if not _iptables("-D", *_FORWARD_RULE):
            return


def leftovers(d: Path) -> list[str]:
    """What a stopped real node left behind: mounts under its directory, processes
    started from its binaries or naming its socket, its bridge, its FORWARD rule."""
    found = [f"mount {m}" for m in mounts_under(paths(d)["dir"])]
    found += [f"shim pid {pid}" for pid in our_shims(d)]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if str(paths(d)["dir"]).encode() in cmd and b"containerd-shim" not in cmd:
            line = cmd.replace(b"\0", b" ").decode(errors="replace")[:200]
            found.append(f"process {entry.name}: {line}")
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        found.append(f"bridge {BRIDGE}")
    if _iptables("-C", *_FORWARD_RULE):
        found.append("the FORWARD rule for the bridge")
    return found


def node_ready(api: Any) -> bool:
    status, body = api.request("GET", f"/api/v1/nodes/{NODE_NAME}")
    if status != 200:
        return False
    conds = (body.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def prepare(state: dict[str, Any]) -> None:
    """Record the real node in `state` (binaries built, address, ports) before anything
    starts: other components' command lines depend on it (kwok's node selection, KCM's
    endpointslice controller for cluster DNS)."""
    if os.geteuid() != 0:
        raise RuntimeError("--real-node needs root (containers, mounts, network namespaces)")
    bins = build()
    state["real_node"] = {"bin_dir": str(bins), "ip": node_ip(), "name": NODE_NAME}
    for port in PORTS:
        state["ports"][port] = free_port()


def start(d: Path, state: dict[str, Any], api: Any, launch: Any) -> None:
    """Start containerd, CoreDNS and kubelet (launch(name) starts a component and
    records its PID), import the images, wait for the node to be Ready."""
    write_config(d, state, Path(state["real_node"]["bin_dir"]))
    allow_bridge_forwarding()
    pid = launch("containerd")
    sock = paths(d)["socket"]
    wait_for(
        "containerd", lambda: sock.exists() and crictl(d, state, "version") is not None, 60, [pid]
    )
    import_images(d, state)
    pid = launch("coredns")
    ready = f"http://127.0.0.1:{state['ports']['coredns_ready']}/ready"
    wait_for("coredns /ready", lambda: http_ok(ready), 60, [pid])
    pid = launch("kubelet")
    wait_for(f"real node {NODE_NAME} Ready", lambda: node_ready(api), 120, [pid])
