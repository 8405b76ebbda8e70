"""Small helpers for cluster tests: a TFJob controller process and condition waits.

Waits poll a condition against the real apiserver with a deadline (no fixed sleeps);
the pod-history checks use a real watch.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self, TypeVar

import yaml

from tests.conftest import REPO, Cluster, cluster_mod

T = TypeVar("T")
OPERATOR_LABEL = "training.kubeflow.org/operator-name=tfjob-controller"


def wait_for(fn: Callable[[], T | None], timeout: float, what: str, interval: float = 0.1) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = fn()
        except AssertionError as e:
            last = e
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


class ControllerProcess:
    """tfjob-controller as a real process against the local cluster."""

    def __init__(
        self,
        cluster: Cluster,
        *extra: str,
        log_name: str = "tfjob-controller",
        kubeconfig: str | None = None,
        secure_metrics: bool = False,
    ) -> None:
        """``secure_metrics``: /metrics as deployed (HTTPS, a token and RBAC needed);
        else plain HTTP, which the tests' barrier (/debug/queue) reads."""
        self.cluster = cluster
        self.secure_metrics = secure_metrics
        self.kubeconfig = kubeconfig or cluster.kubeconfig
        self.extra = list(extra)
        self.log_path = cluster.dir / "logs" / f"{log_name}-test.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.health_port = 0
        self.metrics_port = 0
        self.log_start = 0
        #: its training-progress endpoint, when it serves one
        self.progress: Any = None

    def start(self) -> None:
        self.health_port, self.metrics_port = cluster_mod.free_port(), cluster_mod.free_port()
        exe = Path(sys.executable).parent / "tfjob-controller"
        logf = open(self.log_path, "ab")
        self.log_start = logf.tell()  # the log is shared with earlier runs
        self.proc = subprocess.Popen(
            [
                str(exe),
                f"--kubeconfig={self.kubeconfig}",
                "--log-format=json",
                "--log-level=debug",
                f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                f"--metrics-secure={str(self.secure_metrics).lower()}",
                f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
                *self.extra,
            ],
            stdout=logf,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        logf.close()
        wait_for(self.ready, 60, "controller /readyz")

    def ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"controller exited with {self.proc.returncode}; see {self.log_path}"
            )
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.health_port}/readyz", timeout=1
            ) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def log_text(self) -> str:
        """What this process (since its last start) has logged."""
        with open(self.log_path, "rb") as f:
            f.seek(self.log_start)
            return f.read().decode(errors="replace")

    def metrics(self) -> str:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as r:
            return str(r.read().decode())

    def pending(self, key: str) -> dict[str, Any]:
        """The controller's /debug/queue answer for ``key`` (<namespace>/<name>)."""
        query = urllib.parse.urlencode({"key": key})
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/debug/queue?{query}", timeout=5
        ) as r:
            return dict(json.loads(r.read()))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)

    def restart(self) -> None:
        self.stop(signal.SIGKILL)
        self.start()


class Kube:
    """Synchronous JSON access for assertions (stdlib only)."""

    def __init__(self, cluster: Cluster) -> None:
        self.api = cluster.api

    def req(self, method: str, path: str, body: Any = None, ctype: str = "application/json") -> Any:
        status, out = self.api.request(method, path, body, content_type=ctype)
        if status >= 300 and not (method == "GET" and status == 404):
            raise ApiFailure(status, out)
        return out if status < 300 else None

    # TFJobs
    def tfjobs(self, ns: str) -> str:
        return f"/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs"

    def create_tfjob(self, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self.req("POST", self.tfjobs(ns), body))

    def tfjob(self, ns: str, name: str) -> dict[str, Any] | None:
        return self.req("GET", f"{self.tfjobs(ns)}/{name}")  # type: ignore[no-any-return]

    def patch_tfjob(self, ns: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return dict(
            self.req("PATCH", f"{self.tfjobs(ns)}/{name}", patch, "application/merge-patch+json")
        )

    # Pods and services
    def pods(self, ns: str, job: str | None = None) -> list[dict[str, Any]]:
        sel = OPERATOR_LABEL + (f",training.kubeflow.org/job-name={job}" if job else "")
        out = self.req(
            "GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={urllib.parse.quote(sel)}"
        )
        return sorted(out["items"], key=lambda p: p["metadata"]["name"])

    def services(self, ns: str, job: str | None = None) -> list[dict[str, Any]]:
        sel = OPERATOR_LABEL + (f",training.kubeflow.org/job-name={job}" if job else "")
        out = self.req(
            "GET", f"/api/v1/namespaces/{ns}/services?labelSelector={urllib.parse.quote(sel)}"
        )
        return sorted(out["items"], key=lambda p: p["metadata"]["name"])

    def pod(self, ns: str, name: str) -> dict[str, Any] | None:
        return self.req("GET", f"/api/v1/namespaces/{ns}/pods/{name}")  # type: ignore[no-any-return]

    def exit_pod(self, ns: str, name: str, code: int, container: str | None = "tensorflow") -> None:
        ann = {"kwok.test/exit-code": str(code)}
        if container:
            ann["kwok.test/container"] = container
        self.req(
            "PATCH",
            f"/api/v1/namespaces/{ns}/pods/{name}",
            {"metadata": {"annotations": ann}},
            "application/merge-patch+json",
        )

    def delete_pod(self, ns: str, name: str, grace: int | None = None) -> None:
        body = {"gracePeriodSeconds": grace} if grace is not None else None
        self.req("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", body)

    def columns(self, ns: str, name: str) -> dict[str, Any]:
        """The TFJob's row as kubectl shows it: the apiserver's Table for the CRD's
        printer columns, by column name."""
        status, table = self.api.request(
            "GET",
            f"{self.tfjobs(ns)}/{name}",
            headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        )
        assert status == 200, table
        names = [c["name"] for c in table["columnDefinitions"]]
        return dict(zip(names, table["rows"][0]["cells"], strict=True))

    def events(self, ns: str) -> list[dict[str, Any]]:
        return list(self.req("GET", f"/api/v1/namespaces/{ns}/events")["items"])

    def apiserver_requests(self) -> dict[tuple[str, str, str], float]:
        """apiserver_request_total on main resources, summed by (verb, resource, code)."""
        status, text = self.api.request("GET", "/metrics")
        assert status == 200
        counts: dict[tuple[str, str, str], float] = {}
        for line in str(text).splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels_s, value = line[len("apiserver_request_total{") :].rsplit("} ", 1)
            labels = dict(
                kv.split("=", 1) for kv in labels_s.replace('"', "").split(",") if "=" in kv
            )
            if labels.get("subresource"):
                continue  # e.g. POST pods/binding by the scheduler
            k = (labels.get("verb", ""), labels.get("resource", ""), labels.get("code", ""))
            counts[k] = counts.get(k, 0.0) + float(value)
        return counts


class ApiFailure(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"{status}: {body}")
        self.status = status
        self.body = body


def condition(job: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for c in ((job or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None


def is_true(job: dict[str, Any] | None, type_: str) -> bool:
    c = condition(job, type_)
    return bool(c and c.get("status") == "True")


def live(pod: dict[str, Any]) -> bool:
    return not pod["metadata"].get("deletionTimestamp")


def all_running(kube: Kube, ns: str, job: str, n: int) -> list[dict[str, Any]] | None:
    """The job's pods if there are exactly n, all live and Running."""
    pods = kube.pods(ns, job)
    if len(pods) == n and all(
        live(p) and p.get("status", {}).get("phase") == "Running" for p in pods
    ):
        return pods
    return None


def wait_job(kube: Kube, ns: str, name: str, type_: str, timeout: float = 30) -> dict[str, Any]:
    """The job once its condition type_ is True."""

    def check() -> dict[str, Any] | None:
        job = kube.tfjob(ns, name)
        return job if is_true(job, type_) else None

    return wait_for(check, timeout, f"{name} {type_}")


def wait_running(
    kube: Kube, ns: str, name: str, n: int, timeout: float = 30
) -> list[dict[str, Any]]:
    """All n pods Running and the job's Running condition True."""
    pods = wait_for(lambda: all_running(kube, ns, name, n), timeout, f"{n} running pods of {name}")
    wait_job(kube, ns, name, "Running", timeout)
    return pods


def wait_namespaces_gone(kube: Kube, timeout: float = 180) -> None:
    """Earlier tests' namespaces, deleted in the background, finish going. A test that
    runs a controller of its own waits for them first: their jobs would hand it their
    pods to let go and creates to refuse, on its rate limit (and its 2 CPUs)."""
    wait_for(
        lambda: (
            not [
                n
                for n in kube.req("GET", "/api/v1/namespaces")["items"]
                if n["status"].get("phase") == "Terminating"
            ]
        ),
        timeout,
        "earlier tests' namespaces to be gone",
    )


@contextlib.contextmanager
def in_place_of(
    session: ControllerProcess, own: ControllerProcess, kube: Kube
) -> Iterator[ControllerProcess]:
    """Run ``own`` with the session's controller stopped, one controller acting at a
    time (once other tests' namespaces are gone, so it acts on nothing of theirs); the
    session's starts again whatever happens, and ``own`` must exit 0 when stopped."""
    wait_namespaces_gone(kube)
    session.stop()
    try:
        own.start()
        yield own
    finally:
        code = own.stop()
        session.start()
    assert code == 0, f"{own.log_path} exited {code}"


def release_finalizers(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """``tfjob-controller release-finalizers`` run against the cluster, as the documented
    uninstall runs it."""
    exe = Path(sys.executable).parent / "tfjob-controller"
    return subprocess.run(
        [str(exe), "release-finalizers", f"--kubeconfig={cluster.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def sample(name: str = "tfjob-chief-ps-workers") -> dict[str, Any]:
    """A TFJob from config/samples/."""
    return dict(yaml.safe_load((REPO / "config" / "samples" / f"{name}.yaml").read_text()))


def env_of(pod: dict[str, Any], var: str, container: str = "tensorflow") -> str | None:
    for c in pod["spec"]["containers"]:
        if c["name"] == container:
            for e in c.get("env") or []:
                if e["name"] == var:
                    return str(e.get("value"))
    return None


class WatchThread:
    """Lists, then watches one collection in a background thread, handing every
    ADDED/MODIFIED/DELETED event, and each object of the initial list as LISTED,
    to ``_observe``."""

    def __init__(self, cluster: Cluster, path: str) -> None:
        self.cluster = cluster
        self.path = path
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        assert self._ready.wait(10), f"watch on {self.path} never started"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(15)

    def _observe(self, type_: str, obj: dict[str, Any]) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        api = self.cluster.api
        _, lst = api.request("GET", self.path)
        for item in lst["items"]:
            self._observe("LISTED", item)
        rv = lst["metadata"]["resourceVersion"]
        self._ready.set()
        ctx: ssl.SSLContext = api.ctx
        while not self._stop.is_set():
            url = (
                f"{api.base}{self.path}?watch=true&resourceVersion={rv}"
                "&timeoutSeconds=5&allowWatchBookmarks=true"
            )
            try:
                with urllib.request.urlopen(url, context=ctx, timeout=10) as r:
                    for raw in r:
                        ev = json.loads(raw)
                        obj = ev["object"]
                        rv = obj["metadata"].get("resourceVersion", rv)
                        if ev["type"] != "BOOKMARK":
                            self._observe(ev["type"], obj)
                        if self._stop.is_set():
                            break
            except OSError:
                continue


class PodHistory(WatchThread):
    """Watches pods of a namespace and checks an invariant on every event:
    never two live (not deleted) pods for one (job, replica type, index)."""

    def __init__(self, cluster: Cluster, ns: str) -> None:
        self.ns = ns
        self.violations: list[str] = []
        self.events: list[tuple[str, str, str]] = []
        self.live: dict[str, dict[str, Any]] = {}
        super().__init__(cluster, f"/api/v1/namespaces/{ns}/pods")

    def _observe(self, type_: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        if type_ == "LISTED":
            self.live[uid] = pod
            return
        self.events.append((type_, pod["metadata"]["name"], uid))
        if type_ == "DELETED":
            self.live.pop(uid, None)
        else:
            self.live[uid] = pod
        slots: dict[tuple[str, str, str], list[str]] = {}
        for p in self.live.values():
            labels = p["metadata"].get("labels") or {}
            k = (
                labels.get("training.kubeflow.org/job-name", ""),
                labels.get("training.kubeflow.org/replica-type", ""),
                labels.get("training.kubeflow.org/replica-index", ""),
            )
            slots.setdefault(k, []).append(p["metadata"]["name"])
        for k, names in slots.items():
            if len(names) > 1:
                self.violations.append(f"two live pods for {k}: {names}")
