"""Facts about this host that the cluster needs: where its state lives, free ports,
live processes, and waiting on a condition with progress output."""

from __future__ import annotations

import os
import random
import signal
import socket
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def cluster_dir() -> Path:
    return Path(os.environ.get("TFJOB_CLUSTER_DIR", REPO / ".cluster")).resolve()


def log(msg: str) -> None:
    print(f"[cluster {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


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
        if port in _handed_out:
            continue  # free now, but given to a caller that may not have bound it yet
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _handed_out.add(port)
            return port
    raise RuntimeError("no free port below the ephemeral range")


#: ports this process's free_port() returned: one cluster's components are given their
#: ports together, before any of them binds
_handed_out: set[int] = set()


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


def stop_process(pid: int, timeout: float = 10) -> None:
    """SIGTERM, SIGKILL after `timeout`, and reap it if it is our child."""
    if pid_alive(pid):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def http_ok(url: str) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=2) as r:
            return bool(r.status == 200)
    except (OSError, urllib.error.URLError):
        return False


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
