"""A real local Kubernetes control plane as plain processes, without Docker.

etcd, kube-apiserver, kube-controller-manager (garbage collector and namespace
controllers only), kube-scheduler and kwok (simulated nodes and kubelet), all on
loopback, on free ports, with their own PKI and RBAC authorization.

    python hack/cluster.py up|down|status [--nodes N] [--node-cpu 8] ...

`up` is idempotent: a cluster that is already running is reused. `down` stops exactly
the processes `up` started (by PID, recorded in state.json) and removes the state.
The cluster directory defaults to <repo>/.cluster (TFJOB_CLUSTER_DIR overrides it);
it holds kubeconfig, pki/, logs/ and state.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
COMPONENTS = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]


def log(msg: str) -> None:
    print(f"[cluster {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cluster_dir() -> Path:
    return Path(os.environ.get("TFJOB_CLUSTER_DIR", REPO / ".cluster")).resolve()


def free_port() -> int:
    """A free loopback port *below* the kernel's ephemeral range.

    A port from the ephemeral range (what binding port 0 gives) can be taken, while its
    server restarts, by a client's outgoing connection to it: a TCP self-connect, after
    which the restarted server cannot bind. Ports outside that range never are.
    """
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    top = min(low, 32768) - 1
    for _ in range(200):
        port = rng.randint(max(1024, top - 12000), top)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


def listening_ports() -> set[int]:
    """Local TCP ports with a socket in LISTEN state (/proc/net/tcp*, state 0A)."""
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still "exists"; treat it as dead.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


# --- binaries -----------------------------------------------------------------------


def build_binaries() -> Path:
    out = subprocess.run(
        ["bash", str(REPO / "hack" / "build-binaries.sh")],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def kwok_stage_files(bins: Path) -> list[Path]:
    """kwok's own fast node/pod stages (copied beside the binaries by
    build-binaries.sh), plus our exit-code stage."""
    stages = bins.parent / "stages"
    files = [
        stages / "node-initialize.yaml",
        stages / "pod-ready.yaml",
        stages / "pod-delete.yaml",
        REPO / "hack/kwok-exit-stage.yaml",
    ]
    for f in files:
        if not f.exists():
            raise SystemExit(f"missing kwok stage file {f}; run hack/build-binaries.sh")
    return files


# --- PKI ----------------------------------------------------------------------------


def make_pki(pki: Path) -> None:
    """A CA, the apiserver's serving cert, an admin client cert and the SA key pair.

    Every cert carries SubjectKeyIdentifier/AuthorityKeyIdentifier: strict X.509
    verification (Python 3.13's default context) rejects certs without them.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    pki.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    later = now + dt.timedelta(days=3650)

    def write_key(path: Path, key: Any) -> None:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )
        path.chmod(0o600)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tfjob-local-ca")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    (pki / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    write_key(pki / "ca.key", ca_key)

    def leaf(name: str, subject: x509.Name, usage: Any, sans: list[Any] | None) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        b = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(later)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=True,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                critical=False,
            )
        )
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = b.sign(ca_key, hashes.SHA256())
        (pki / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        write_key(pki / f"{name}.key", key)

    leaf(
        "apiserver",
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
        ExtendedKeyUsageOID.SERVER_AUTH,
        [
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes"),
            x509.DNSName("kubernetes.default"),
            x509.DNSName("kubernetes.default.svc"),
        ],
    )
    leaf(
        "admin",
        x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                x509.NameAttribute(NameOID.COMMON_NAME, "admin"),
            ]
        ),
        ExtendedKeyUsageOID.CLIENT_AUTH,
        None,
    )
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write_key(pki / "sa.key", sa)
    (pki / "sa.pub").write_bytes(
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def write_kubeconfig(d: Path, api_port: int) -> Path:
    import yaml

    pki = d / "pki"
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "tfjob-local",
                "cluster": {
                    "server": f"https://127.0.0.1:{api_port}",
                    "certificate-authority": str(pki / "ca.crt"),
                },
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate": str(pki / "admin.crt"),
                    "client-key": str(pki / "admin.key"),
                },
            }
        ],
        "contexts": [
            {"name": "tfjob-local", "context": {"cluster": "tfjob-local", "user": "admin"}}
        ],
        "current-context": "tfjob-local",
    }
    path = d / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


# --- talking to the apiserver (stdlib only, so `up` needs no client library) --------


class Api:
    def __init__(self, d: Path, port: int) -> None:
        self.base = f"https://127.0.0.1:{port}"
        self.ctx = ssl.create_default_context(cafile=str(d / "pki" / "ca.crt"))
        self.ctx.load_cert_chain(str(d / "pki" / "admin.crt"), str(d / "pki" / "admin.key"))

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=10) as r:
                raw = r.read()
                status = r.status
        except urllib.error.HTTPError as e:
            raw, status = e.read(), e.code
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def ready(self) -> bool:
        try:
            status, _body = self.request("GET", "/readyz")
        except (OSError, ssl.SSLError):
            return False
        return status == 200

    def apply(self, obj: dict[str, Any], collection: str) -> None:
        """Create, or replace if it exists (server-side apply keeps this idempotent)."""
        name = obj["metadata"]["name"]
        status, body = self.request(
            "PATCH",
            f"{collection}/{name}?fieldManager=tfjob-cluster&force=true",
            obj,
            content_type="application/apply-patch+yaml",
        )
        if status >= 300:
            raise RuntimeError(f"apply {collection}/{name}: {status} {body}")


def wait_for(what: str, check: Any, timeout: float, proc_pids: list[int] | None = None) -> None:
    deadline = time.monotonic() + timeout
    last_note = time.monotonic()
    while time.monotonic() < deadline:
        if check():
            return
        for pid in proc_pids or []:
            if not pid_alive(pid):
                raise RuntimeError(
                    f"{what}: process {pid} exited; see logs in {cluster_dir()}/logs"
                )
        if time.monotonic() - last_note > 10:
            log(f"still waiting for {what}")
            last_note = time.monotonic()
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


def http_ok(url: str) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=2) as r:
            return bool(r.status == 200)
    except (OSError, urllib.error.URLError):
        return False


# --- processes ----------------------------------------------------------------------


def start(d: Path, name: str, argv: list[str]) -> int:
    logs = d / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    out = open(logs / f"{name}.log", "ab")
    proc = subprocess.Popen(
        argv,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # survives the `up` command; `down` kills it by PID
        cwd=str(d),
    )
    out.close()
    return proc.pid


def load_state(d: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads((d / "state.json").read_text()))
    except (OSError, ValueError):
        return None


def save_state(d: Path, state: dict[str, Any]) -> None:
    tmp = d / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(d / "state.json")


def component_argv(
    name: str, d: Path, bins: Path, ports: dict[str, int], opts: argparse.Namespace
) -> list[str]:
    pki = d / "pki"
    kubeconfig = str(d / "kubeconfig")
    if name == "etcd":
        return [
            str(bins / "etcd"),
            "--name=node0",
            f"--data-dir={d / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{ports['etcd']}",
            f"--advertise-client-urls=http://127.0.0.1:{ports['etcd']}",
            f"--listen-peer-urls=http://127.0.0.1:{ports['etcd_peer']}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{ports['etcd_peer']}",
            f"--initial-cluster=node0=http://127.0.0.1:{ports['etcd_peer']}",
            "--unsafe-no-fsync=true",
            "--quota-backend-bytes=8589934592",
            "--log-level=warn",
        ]
    if name == "kube-apiserver":
        argv = [
            str(bins / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports['apiserver']}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            # No serviceaccount controller runs, and no node-lifecycle controller would
            # ever lift the not-ready taint that TaintNodesByCondition adds.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            # A loopback advertise address fails the kubernetes Endpoints validation.
            "--endpoint-reconciler-type=none",
            f"--cert-dir={d / 'apiserver-certs'}",
            "--max-requests-inflight=0",
            "--max-mutating-requests-inflight=0",
            "--enable-priority-and-fairness=false",
            "--v=1",
        ]
        if opts.audit:
            argv += [
                f"--audit-policy-file={REPO / 'hack' / 'audit-policy.yaml'}",
                f"--audit-log-path={d / 'logs' / 'audit.log'}",
                "--audit-log-format=json",
                "--audit-log-mode=batch",
            ]
        return argv
    if name == "kube-controller-manager":
        return [
            str(bins / "kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--controllers=garbage-collector-controller,namespace-controller",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['kcm']}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            "--concurrent-gc-syncs=40",
            "--kube-api-qps=1000",
            "--kube-api-burst=2000",
            "--v=1",
        ]
    if name == "kube-scheduler":
        sched = d / "scheduler.yaml"
        sched.write_text(
            "apiVersion: kubescheduler.config.k8s.io/v1\n"
            "kind: KubeSchedulerConfiguration\n"
            f"clientConnection: {{kubeconfig: {kubeconfig!r}, qps: 1000, burst: 2000}}\n"
            "leaderElection: {leaderElect: false}\n"
            "profiles:\n"
            "- schedulerName: default-scheduler\n"
            # Lets pods aimed at Volcano bind here too (no gang semantics).
            "- schedulerName: volcano\n"
        )
        return [
            str(bins / "kube-scheduler"),
            f"--config={sched}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['scheduler']}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            "--v=1",
        ]
    if name == "kwok":
        argv = [
            str(bins / "kwok"),
            f"--kubeconfig={kubeconfig}",
            "--manage-all-nodes=true",
            "--cidr=10.244.0.0/16",
            "--node-lease-duration-seconds=0",
        ]
        for f in kwok_stage_files(bins):
            argv.append(f"--config={f}")
        return argv
    raise ValueError(name)


def node_manifest(i: int, opts: argparse.Namespace) -> dict[str, Any]:
    res = {
        "cpu": str(opts.node_cpu),
        "memory": opts.node_memory,
        "nvidia.com/gpu": str(opts.node_gpu),
        "pods": str(opts.node_pods),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"kwok-node-{i}",
            "labels": {"type": "kwok", "kubernetes.io/hostname": f"kwok-node-{i}"},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "status": {"allocatable": res, "capacity": res},
    }


def crd_files() -> list[Path]:
    root = REPO / "config" / "crd"
    return sorted(p for p in root.rglob("*.yaml") if p.is_file()) if root.exists() else []


def install_crds(api: Api) -> None:
    import yaml

    names = []
    for f in crd_files():
        for doc in yaml.safe_load_all(f.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                api.apply(doc, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
                names.append(doc["metadata"]["name"])

    def established() -> bool:
        for n in names:
            status, body = api.request(
                "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}"
            )
            conds = (
                ((body or {}).get("status") or {}).get("conditions") or [] if status == 200 else []
            )
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                return False
        return True

    wait_for("CRDs established", established, 60)
    if names:
        log(f"CRDs installed: {', '.join(names)}")


# --- commands -----------------------------------------------------------------------


def status_report(d: Path) -> tuple[bool, list[str]]:
    state = load_state(d)
    if not state:
        return False, [f"no cluster in {d}"]
    lines, all_up = [], True
    for name in COMPONENTS:
        pid = state["pids"].get(name)
        alive = bool(pid) and pid_alive(pid)
        all_up &= alive
        lines.append(f"{name:24s} pid {pid}  {'running' if alive else 'STOPPED'}")
    api = Api(d, state["ports"]["apiserver"])
    ready = api.ready()
    all_up &= ready
    lines.append(f"apiserver https://127.0.0.1:{state['ports']['apiserver']} ready={ready}")
    lines.append(f"kubeconfig {d / 'kubeconfig'}")
    return all_up, lines


def cmd_up(opts: argparse.Namespace) -> int:
    t0 = time.monotonic()
    d = cluster_dir()
    state = load_state(d)
    if state:
        ok, _ = status_report(d)
        if ok:
            api = Api(d, state["ports"]["apiserver"])
            install_crds(api)
            log(f"reusing the running cluster in {d}")
            print(d / "kubeconfig")
            return 0
        log("found a stale cluster; stopping its leftovers")
        cmd_down(opts)
    bins = build_binaries()
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    make_pki(d / "pki")
    ports = {k: free_port() for k in ("etcd", "etcd_peer", "apiserver", "kcm", "scheduler")}
    write_kubeconfig(d, ports["apiserver"])
    state = {"pids": {}, "ports": ports, "bin_dir": str(bins), "started": time.time()}
    save_state(d, state)

    def launch(name: str) -> int:
        pid = start(d, name, component_argv(name, d, bins, ports, opts))
        state["pids"][name] = pid
        save_state(d, state)
        log(f"started {name} (pid {pid})")
        return pid

    try:
        pid = launch("etcd")
        wait_for("etcd", lambda: http_ok(f"http://127.0.0.1:{ports['etcd']}/health"), 60, [pid])
        pid = launch("kube-apiserver")
        api = Api(d, ports["apiserver"])
        wait_for("kube-apiserver /readyz", api.ready, 120, [pid])
        # CRDs before KCM: the garbage collector re-reads discovery only every 30 s.
        install_crds(api)
        pid = launch("kube-controller-manager")
        wait_for(
            "kube-controller-manager",
            lambda: http_ok(f"https://127.0.0.1:{ports['kcm']}/healthz"),
            60,
            [pid],
        )
        pid = launch("kube-scheduler")
        wait_for(
            "kube-scheduler",
            lambda: http_ok(f"https://127.0.0.1:{ports['scheduler']}/healthz"),
            60,
            [pid],
        )
        pid = launch("kwok")
        for i in range(opts.nodes):
            api.apply(node_manifest(i, opts), "/api/v1/nodes")

        def nodes_ready() -> bool:
            status, body = api.request("GET", "/api/v1/nodes")
            if status != 200:
                return False
            ready = [
                n
                for n in body["items"]
                if any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in (n.get("status") or {}).get("conditions") or []
                )
            ]
            return len(ready) >= opts.nodes

        wait_for(f"{opts.nodes} kwok nodes Ready", nodes_ready, 60, [pid])

        def default_ns() -> bool:
            return api.request("GET", "/api/v1/namespaces/default")[0] == 200

        wait_for("namespace default", default_ns, 30)
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
    pids = [state["pids"][n] for n in reversed(COMPONENTS) if n in state["pids"]]
    # One at a time, in reverse start order: kube-apiserver shuts down quickly only
    # while etcd is still there to answer it.
    for pid in pids:
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # Reap if the process happens to be our child (e.g. within one test run).
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
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


def cmd_restart(opts: argparse.Namespace) -> int:
    """Kill one component (SIGKILL, like a crash) and start it again with the same flags."""
    d = cluster_dir()
    state = load_state(d)
    if not state:
        raise SystemExit("no cluster running")
    name = opts.component
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
    own = {
        "etcd": ["etcd", "etcd_peer"],
        "kube-apiserver": ["apiserver"],
        "kube-controller-manager": ["kcm"],
        "kube-scheduler": ["scheduler"],
    }.get(name, [])
    ports = {state["ports"][k] for k in own}
    wait_for(f"{name}'s ports to close", lambda: not ports & listening_ports(), 30)
    bins = Path(state["bin_dir"])
    new = start(d, name, component_argv(name, d, bins, state["ports"], opts))
    state["pids"][name] = new
    save_state(d, state)
    if name == "kube-apiserver":
        wait_for("kube-apiserver /readyz", Api(d, state["ports"]["apiserver"]).ready, 120, [new])
    log(f"restarted {name} (pid {new})")
    return 0


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
    p = argparse.ArgumentParser(prog="hack/cluster.sh", description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["up", "down", "status", "restart", "compact"])
    p.add_argument("component", nargs="?", choices=COMPONENTS, help="for restart")
    p.add_argument("--nodes", type=int, default=int(os.environ.get("TFJOB_CLUSTER_NODES", 4)))
    p.add_argument("--node-cpu", default="8")
    p.add_argument("--node-memory", default="32Gi")
    p.add_argument("--node-gpu", default="8")
    p.add_argument("--node-pods", default="110")
    p.add_argument(
        "--audit",
        action="store_true",
        default=os.environ.get("TFJOB_CLUSTER_AUDIT") == "1",
        help="write an apiserver audit log at Metadata level (for benchmarks)",
    )
    opts = p.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
