"""Acceptance for the local control plane itself (etcd, apiserver, KCM, scheduler, kwok)."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from kubernetes_asyncio import client, config

from tests.conftest import REPO, Cluster, cluster_mod

#: needs the local cluster itself
pytestmark = pytest.mark.local_only


@pytest.fixture
async def api(cluster: Cluster) -> AsyncIterator[client.ApiClient]:
    cfg = client.Configuration()
    await config.load_kube_config(config_file=cluster.kubeconfig, client_configuration=cfg)
    async with client.ApiClient(cfg) as c:
        yield c


async def raw(api: client.ApiClient, method: str, path: str, body: Any = None) -> Any:
    resp = await api.call_api(
        path,
        method,
        body=body,
        response_types_map=None,
        _preload_content=False,
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    data = await resp[0].read() if isinstance(resp, tuple) else await resp.read()
    return orjson.loads(data) if data else None


def pod(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **extra},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "tensorflow", "image": "example.invalid/tf:1"},
                {"name": "sidecar", "image": "example.invalid/side:1"},
            ],
        },
    }


async def wait_for_pod(
    api: client.ApiClient, ns: str, name: str, pred: Any, timeout: float = 30
) -> dict[str, Any]:
    """Watch one pod until pred(pod) holds."""
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        p = await raw(api, "GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        if p.get("kind") == "Pod":
            last = p
            if pred(p):
                return p
        rv = p.get("metadata", {}).get("resourceVersion")
        left = max(1, int(deadline - time.monotonic()))
        resp = await core.list_namespaced_pod(
            ns,
            field_selector=f"metadata.name={name}",
            watch=True,
            resource_version=rv,
            timeout_seconds=min(left, 10),
            _preload_content=False,
        )
        async with resp:
            async for line in resp.content:
                ev = orjson.loads(line)
                if ev["type"] in ("ADDED", "MODIFIED") and pred(ev["object"]):
                    return dict(ev["object"])
    raise AssertionError(f"pod {name} never satisfied the condition; last: {last.get('status')}")


async def test_version_and_readyz(cluster: Cluster, api: client.ApiClient) -> None:
    version = await raw(api, "GET", "/version")
    assert version["major"] == "1" and version["gitVersion"].startswith("v1.")
    resp = await api.call_api(
        "/readyz", "GET", _preload_content=False, auth_settings=["BearerToken"]
    )
    r = resp[0] if isinstance(resp, tuple) else resp
    assert r.status == 200 and (await r.text()) == "ok"


async def exit_with(
    api: client.ApiClient, ns: str, name: str, code: str, container: str | None
) -> None:
    """The program of pod ``name`` exits with ``code`` (kwok's exit stage)."""
    ann = {"kwok.test/exit-code": code}
    if container:
        ann["kwok.test/container"] = container
    await api.call_api(
        f"/api/v1/namespaces/{ns}/pods/{name}",
        "PATCH",
        body={"metadata": {"annotations": ann}},
        header_params={"Content-Type": "application/merge-patch+json"},
        auth_settings=["BearerToken"],
        _preload_content=False,
    )


@pytest.mark.parametrize(
    ("code", "phase", "container"),
    [
        pytest.param("0", "Succeeded", None, id="exit-0"),
        pytest.param("3", "Failed", None, id="exit-3"),
        pytest.param("137", "Failed", "tensorflow", id="exit-137-one-container"),
    ],
)
async def test_pod_scheduled_running_then_exits(
    api: client.ApiClient, namespace: str, code: str, phase: str, container: str | None
) -> None:
    await raw(api, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("p"))
    running = await wait_for_pod(
        api, namespace, "p", lambda p: p["status"].get("phase") == "Running"
    )
    assert running["spec"]["nodeName"].startswith("kwok-node-")
    await exit_with(api, namespace, "p", code, container)
    done = await wait_for_pod(api, namespace, "p", lambda p: p["status"].get("phase") == phase)
    codes = {
        s["name"]: s["state"]["terminated"]["exitCode"] for s in done["status"]["containerStatuses"]
    }
    if container:
        assert codes == {"tensorflow": int(code), "sidecar": 0}
    else:
        assert codes == {"tensorflow": int(code), "sidecar": int(code)}


def statuses(p: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in p["status"]["containerStatuses"]}


@pytest.mark.parametrize(
    ("policy", "code", "container"),
    [
        pytest.param("OnFailure", "3", "tensorflow", id="on-failure-exit-3-one-container"),
        pytest.param("OnFailure", "137", None, id="on-failure-exit-137"),
        pytest.param("Always", "0", "tensorflow", id="always-exit-0"),
    ],
)
async def test_exit_restarts_the_container_in_place(
    api: client.ApiClient, namespace: str, policy: str, code: str, container: str | None
) -> None:
    """What a kubelet does when a container exits under OnFailure (a code other than 0) or
    Always: the pod stays Running, the container's restartCount goes up by one, its
    lastState holds the exit, and it runs again; the exit annotation is consumed, so the
    next exit can be asked for as soon as the restart is seen."""
    body = pod("p")
    body["spec"]["restartPolicy"] = policy
    await raw(api, "POST", f"/api/v1/namespaces/{namespace}/pods", body)
    running = await wait_for_pod(
        api, namespace, "p", lambda p: p["status"].get("phase") == "Running"
    )
    uid = running["metadata"]["uid"]
    exiting = {container} if container else {"tensorflow", "sidecar"}
    for n in (1, 2):
        await exit_with(api, namespace, "p", code, container)
        p = await wait_for_pod(
            api,
            namespace,
            "p",
            lambda p, n=n: statuses(p)["tensorflow"].get("restartCount") == n,
        )
        assert p["metadata"]["uid"] == uid
        assert p["status"]["phase"] == "Running"
        assert "kwok.test/exit-code" not in (p["metadata"].get("annotations") or {})
        for name, s in statuses(p).items():
            assert "running" in s["state"] and s["ready"], s
            if name in exiting:
                ended = s["lastState"]["terminated"]
                reason = "Completed" if code == "0" else "Error"
                assert (s["restartCount"], ended["exitCode"], ended["reason"]) == (
                    n,
                    int(code),
                    reason,
                )
                assert ended["finishedAt"] >= ended["startedAt"]
            else:
                assert s["restartCount"] == 0 and not s.get("lastState"), s
    if policy == "OnFailure":
        # Exit 0 ends the pod under OnFailure; the counts of the restarts stay.
        await exit_with(api, namespace, "p", "0", None)
        done = await wait_for_pod(
            api, namespace, "p", lambda p: p["status"].get("phase") == "Succeeded"
        )
        for name, s in statuses(done).items():
            assert s["state"]["terminated"]["exitCode"] == 0, s
            assert s["restartCount"] == (2 if name in exiting else 0), s


@pytest.mark.parametrize("propagation", ["Background", "Foreground"])
async def test_garbage_collection_of_dependents(
    api: client.ApiClient, namespace: str, propagation: str
) -> None:
    cm = await raw(
        api,
        "POST",
        f"/api/v1/namespaces/{namespace}/configmaps",
        {"metadata": {"name": "owner"}, "data": {}},
    )
    owner_ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": cm["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    await raw(
        api,
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        pod("dependent", ownerReferences=[owner_ref]),
    )
    await raw(
        api,
        "DELETE",
        f"/api/v1/namespaces/{namespace}/configmaps/owner",
        {"propagationPolicy": propagation},
    )
    # Foreground: the dependent goes first, then the owner; background: the reverse.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        dep = await raw(api, "GET", f"/api/v1/namespaces/{namespace}/pods/dependent")
        owner = await raw(api, "GET", f"/api/v1/namespaces/{namespace}/configmaps/owner")
        if dep.get("code") == 404 and owner.get("code") == 404:
            break
        await asyncio.sleep(0.25)  # polling an API condition, bounded by the deadline
    else:
        raise AssertionError("owner and dependent were not both gone within 30 s")


CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.tfjob.local"},
    "spec": {
        "group": "test.tfjob.local",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                            "status": {
                                "type": "object",
                                "properties": {"seen": {"type": "integer"}},
                            },
                        },
                    }
                },
            }
        ],
    },
}


async def test_crd_from_yaml_established_and_usable(
    cluster: Cluster, api: client.ApiClient, namespace: str
) -> None:
    import yaml

    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(CRD))
    base = f"/apis/test.tfjob.local/v1/namespaces/{namespace}/widgets"
    deadline = time.monotonic() + 30
    while True:
        crd = await raw(
            api,
            "GET",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.test.tfjob.local",
        )
        conds = (crd.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conds):
            break
        assert time.monotonic() < deadline, "CRD never Established"
        await asyncio.sleep(0.2)
    created = await raw(
        api,
        "POST",
        base,
        {
            "apiVersion": "test.tfjob.local/v1",
            "kind": "Widget",
            "metadata": {"name": "w1"},
            "spec": {"size": 3},
        },
    )
    assert created["spec"]["size"] == 3, created
    listed = await raw(api, "GET", base)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["w1"]
    # Watch from the list's resourceVersion sees the status update.
    resp = await api.call_api(
        base,
        "GET",
        query_params=[
            ("watch", "true"),
            ("resourceVersion", listed["metadata"]["resourceVersion"]),
            ("timeoutSeconds", "15"),
        ],
        _preload_content=False,
        auth_settings=["BearerToken"],
    )
    r = resp[0] if isinstance(resp, tuple) else resp
    created["status"] = {"seen": 7}
    updated = await raw(api, "PUT", f"{base}/w1/status", created)
    assert updated["status"] == {"seen": 7} and updated["spec"]["size"] == 3
    async with r:
        async for line in r.content:
            ev = orjson.loads(line)
            if ev["type"] == "MODIFIED":
                assert ev["object"]["status"] == {"seen": 7}
                break
    # The status subresource ignores spec changes; the main resource ignores status.
    updated["spec"]["size"] = 99
    after = await raw(api, "PUT", f"{base}/w1/status", updated)
    assert after["spec"]["size"] == 3


def test_down_stops_everything_and_frees_ports(tmp_path: Path) -> None:
    """A second, private cluster: up, then down leaves no process and frees its ports.
    It runs the gang scheduler and its PodGroup controller too: seven processes."""
    env = {**os.environ, "TFJOB_CLUSTER_DIR": str(tmp_path / "c"), "TFJOB_CLUSTER_NODES": "1"}
    run = functools.partial(subprocess.run, cwd=REPO, env=env, check=True)
    run(cluster_mod.command("up", "--gang", "scheduler-plugins"), stdout=subprocess.PIPE)
    try:
        state = orjson.loads((tmp_path / "c" / "state.json").read_bytes())
        pids = list(state["pids"].values())
        gang = {"scheduler-plugins", "scheduler-plugins-controller"}
        assert len(pids) == 7 and gang <= state["pids"].keys(), state["pids"]
        for name in gang:
            assert (tmp_path / "c" / "logs" / f"{name}.log").exists(), name
        run(cluster_mod.command("status"), stdout=subprocess.PIPE)
        assert state["ports"]["apiserver"] in cluster_mod.listening_ports()
    finally:
        run(cluster_mod.command("down"))  # whatever failed above: never left running
    for pid in pids:
        try:
            os.kill(pid, 0)
            alive = open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] != "Z"
        except (ProcessLookupError, FileNotFoundError):
            alive = False
        assert not alive, f"pid {pid} still running"
    listening = cluster_mod.listening_ports()
    assert not set(state["ports"].values()) & listening, "a port of ours still listens"
    assert not (tmp_path / "c").exists()


async def test_kwok_never_acts_on_a_same_named_successor(
    cluster: Cluster, api: client.ApiClient, namespace: str
) -> None:
    """kwok plays the kubelet, and a kubelet's final delete and status patches carry the
    pod's UID: a pod made under the same name since is never touched by what was meant
    for the old one (hack/kwok-uid-preconditions.patch). kwok is paused while the old
    pod is deleted and its successor made, so it sees the old pod's deletion only after
    the successor exists; unpatched it deleted the successor by name."""
    ns, name = namespace, "same-name"
    base = f"/api/v1/namespaces/{ns}/pods"
    kwok_pid = int(orjson.loads((cluster.dir / "state.json").read_bytes())["pids"]["kwok"])
    log_path = cluster.dir / "logs" / "kwok.log"
    refused = f"failed to delete pod {name}: Operation cannot be fulfilled"
    attempts = 5
    for _ in range(attempts):
        log_start = log_path.stat().st_size
        await raw(api, "POST", base, pod(name, finalizers=["kwok.test/hold"]))
        await wait_for_pod(api, ns, name, lambda p: p["status"].get("phase") == "Running")
        await api.call_api(
            f"{base}/{name}",
            "PATCH",
            body={"metadata": {"annotations": {"kwok.test/exit-code": "1"}}},
            header_params={"Content-Type": "application/merge-patch+json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
        await wait_for_pod(api, ns, name, lambda p: p["status"].get("phase") == "Failed")
        os.kill(kwok_pid, signal.SIGSTOP)
        try:
            # Ended, so the delete is immediate (grace 0); the finalizer holds the pod
            # until it is taken off, then the successor is made at once.
            await raw(api, "DELETE", f"{base}/{name}")
            await api.call_api(
                f"{base}/{name}",
                "PATCH",
                body=[{"op": "remove", "path": "/metadata/finalizers"}],
                header_params={"Content-Type": "application/json-patch+json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
            )
            successor = await raw(api, "POST", base, pod(name))
            assert successor.get("kind") == "Pod", successor
        finally:
            os.kill(kwok_pid, signal.SIGCONT)
        uid = successor["metadata"]["uid"]
        running = await wait_for_pod(api, ns, name, lambda p: p["status"].get("phase") == "Running")
        assert running["metadata"]["uid"] == uid
        # kwok plays the old pod's deletion once it reads it; whether that comes before
        # the old pod's DELETED event cancels it is a race, so look for the refusal.
        deadline = time.monotonic() + 10
        seen = False
        while time.monotonic() < deadline and not seen:
            seen = refused.encode() in log_path.read_bytes()[log_start:]
            now = await raw(api, "GET", f"{base}/{name}")
            assert now.get("metadata", {}).get("uid") == uid, "kwok took the successor"
            assert not now["metadata"].get("deletionTimestamp"), "kwok deleted the successor"
            if not seen:
                await asyncio.sleep(0.2)  # polling kwok's log, bounded by the deadline
        await raw(api, "DELETE", f"{base}/{name}", {"gracePeriodSeconds": 0})
        await wait_gone(api, ns, name)
        if seen:
            return
    raise AssertionError(f"kwok never played a stale deletion in {attempts} attempts")


async def wait_gone(api: client.ApiClient, ns: str, name: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (await raw(api, "GET", f"/api/v1/namespaces/{ns}/pods/{name}")).get("code") == 404:
            return
        await asyncio.sleep(0.2)  # polling an API condition, bounded by the deadline
    raise AssertionError(f"pod {name} still there after {timeout} s")
