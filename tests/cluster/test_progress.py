"""Training-progress reports against the real apiserver and the controller process:
each token is one the apiserver issued (TokenRequest bound to a pod, as the kubelet
asks for a projected one) and each verdict is the apiserver's TokenReview."""

from __future__ import annotations

import base64
import json
import os
import random
import socket
import ssl
import threading
import time
import urllib.request
from typing import Any

import orjson
import pytest
from kubeflow.training import TrainingClient

from tests.cluster.kube import ControllerProcess, Kube, all_running, wait_for
from tests.cluster.progress_endpoint import Reporter, audience, mint
from tests.cluster.progress_endpoint import report_path as path
from tests.conftest import Cluster

#: kwok runs the pods; the tokens are minted here the way the kubelet asks for them
pytestmark = pytest.mark.local_only


def job(name: str, workers: int = 2) -> dict[str, Any]:
    tpl = {"spec": {"containers": [{"name": "tensorflow", "image": "tf:test"}]}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": workers, "template": tpl}}},
    }


def started(kube: Kube, ns: str, name: str, n: int = 2) -> list[dict[str, Any]]:
    kube.create_tfjob(ns, job(name, n))
    return wait_for(lambda: all_running(kube, ns, name, n), 60, f"{n} running pods of {name}")


def progress_of(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    got = kube.tfjob(ns, name)
    return (got or {}).get("status", {}).get("trainingProgress")


def test_pods_report_and_the_status_shows_it(
    controller: ControllerProcess, cluster: Cluster, kube: Kube, namespace: str
) -> None:
    pods = started(kube, namespace, "mnist")
    c = pods[0]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["TFJOB_PROGRESS_URL"] == controller.progress.url + path(namespace, "mnist")
    # the CA bundle is in the namespace for the projected volume
    cm = wait_for(
        lambda: kube.req("GET", f"/api/v1/namespaces/{namespace}/configmaps/tfjob-progress-ca"),
        30,
        "the CA bundle ConfigMap",
    )
    assert cm["data"]["ca.crt"] == controller.progress.ca_file.read_text()
    r = Reporter(controller)
    try:
        for i, pod in enumerate(pods):
            token = mint(kube, namespace, pod, audience(namespace, "mnist"))
            for step in (10, 20):
                body = {"step": step + i, "totalSteps": 100, "epoch": 1, "metrics": {"loss": 0.5}}
                status, _, doc = r.post(path(namespace, "mnist"), token, orjson.dumps(body))
                assert status == 204, doc
    finally:
        r.close()
    tp = wait_for(
        lambda: (
            (p := progress_of(kube, namespace, "mnist"))
            and p["replicas"]["Worker"]["reporting"] == 2
            and p
        ),
        10,
        "trainingProgress of both workers",
    )
    assert (tp["reporter"], tp["step"], tp["totalSteps"], tp["percent"]) == (
        "worker-0",
        20,
        100,
        20,
    )
    assert tp["metrics"] == {"loss": 0.5}
    assert [(x["index"], x["step"]) for x in tp["replicas"]["Worker"]["replicas"]] == [
        (0, 20),
        (1, 21),
    ]
    # kubectl's columns: the apiserver's Table for the CRD's printer columns
    cells = kube.columns(namespace, "mnist")
    assert cells["Progress"] == 20
    # the kubeflow-training SDK 1.9.4, unchanged, reads the job as before; the new
    # fields are in the object as the API returns it
    tc = TrainingClient(config_file=cluster.kubeconfig, namespace=namespace, job_kind="TFJob")
    model = tc.get_job("mnist")
    assert model.metadata.name == "mnist" and tc.is_job_running("mnist")
    raw = tc.custom_api.get_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "tfjobs", "mnist"
    )
    assert raw["status"]["trainingProgress"]["step"] == 20


def test_a_pod_can_report_only_for_its_own_job_as_itself(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    a = started(kube, namespace, "job-a")
    started(kube, namespace, "job-b")
    r = Reporter(controller)
    body = b'{"step": 1}'
    try:
        own = mint(kube, namespace, a[1], audience(namespace, "job-a"))
        # its own token at another job's address: the audience is the other job's
        status, headers, doc = r.post(path(namespace, "job-b"), own, body)
        assert status == 401 and headers["www-authenticate"] == "Bearer", doc
        # a token it asked for with job B's audience: valid, but its pod is not B's
        forged = mint(kube, namespace, a[1], audience(namespace, "job-b"))
        status, _, doc = r.post(path(namespace, "job-b"), forged, body)
        assert status == 403 and "is not a pod of" in doc["error"], doc
        # the body cannot say which replica it is: the pod's labels do
        status, _, doc = r.post(
            path(namespace, "job-a"), own, b'{"step": 5, "replicaType": "Chief", "index": 0}'
        )
        assert (status, doc.get("field")) == (400, "index"), doc
        assert r.post(path(namespace, "job-a"), own, b'{"step": 5}')[0] == 204
    finally:
        r.close()
    tp = wait_for(lambda: progress_of(kube, namespace, "job-a"), 10, "job-a's progress")
    assert [(x["index"], x["step"]) for x in tp["replicas"]["Worker"]["replicas"]] == [(1, 5)]
    assert progress_of(kube, namespace, "job-b") is None


def test_tokens_the_apiserver_does_not_accept_are_refused(
    controller: ControllerProcess, cluster: Cluster, kube: Kube, namespace: str
) -> None:
    pods = started(kube, namespace, "mnist")
    aud = audience(namespace, "mnist")
    r = Reporter(controller)
    body = b'{"step": 1}'
    try:
        assert r.post(path(namespace, "mnist"), None, body)[0] == 401  # no token
        assert r.post(path(namespace, "mnist"), "not-a-token", body)[0] == 401
        expired = resigned(cluster, mint(kube, namespace, pods[0], aud), exp_in=-60)
        status, _, doc = r.post(path(namespace, "mnist"), expired, body)
        # refused unreviewed (its own exp says so), and the body says only that
        assert (status, doc["error"]) == (401, "unauthorized"), doc
        # a token used before its pod was deleted: the pod is gone from the cache
        used = mint(kube, namespace, pods[0], aud)
        assert r.post(path(namespace, "mnist"), used, body)[0] == 204
        # a fresh token of a pod deleted before its first use: the apiserver refuses it
        fresh = mint(kube, namespace, pods[1], aud)
        for p in pods:
            kube.delete_pod(namespace, p["metadata"]["name"], grace=0)
        wait_for(
            lambda: all(
                (x := kube.pod(namespace, p["metadata"]["name"])) is not None
                and x["metadata"]["uid"] != p["metadata"]["uid"]
                for p in pods
            ),
            30,
            "both pods replaced",
        )
        # its pod's name is another pod's now: refused before any review
        status, _, doc = r.post(path(namespace, "mnist"), fresh, body)
        assert status == 403 and "gone" in doc["error"], doc
        status, _, doc = r.post(path(namespace, "mnist"), used, body)
        assert status == 403 and "gone" in doc["error"], doc
        # no such job
        assert r.post(path(namespace, "nope"), used, body)[0] == 401
    finally:
        r.close()
    # and no TLS: a plain-text request gets no HTTP answer
    host, port = controller.progress.url.removeprefix("https://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        try:
            answer = s.recv(100)
        except OSError:
            answer = b""
        assert not answer.startswith(b"HTTP/1.1 2")


def test_limits_and_malformed_documents(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    pods = started(kube, namespace, "mnist", 1)
    token = mint(kube, namespace, pods[0], audience(namespace, "mnist"))
    r = Reporter(controller)
    p = path(namespace, "mnist")
    try:
        status, _, doc = r.post(p, token, b'{"step": "ten"}')
        assert (status, doc["field"]) == (400, "step") and "integer" in doc["error"]
        status, _, doc = r.post(p, token, b'{"step": 1, "metrics": {"loss": "low"}}')
        assert (status, doc["field"]) == (400, "metrics.loss")
        assert r.post(p, token, b"x" * 20000)[0] == 413
        r = Reporter(controller)  # 413 closes the connection
        assert r.post(p, token, b'{"step": 1}', {"Content-Type": "text/plain"})[0] == 415
        r = Reporter(controller)
        answers = [r.post(p, token, b'{"step": 2}') for _ in range(8)]
        statuses = [a[0] for a in answers]
        # the burst (5) less the three reports above that reached the limiter
        assert 429 in statuses and statuses[0] == 204, statuses
        assert int(answers[statuses.index(429)][1]["retry-after"]) >= 1
    finally:
        r.close()
    counts = controller.metrics()
    for code in ("400", "413", "415", "429"):
        assert f'tfjob_progress_reports_requests_total{{code="{code}"}}' in counts


def test_a_fuzzed_stream_never_stops_the_controller(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    pods = started(kube, namespace, "mnist", 1)
    token = mint(kube, namespace, pods[0], audience(namespace, "mnist"))
    rng = random.Random(int(os.environ.get("TFJOB_FUZZ_SEED", "33")))
    host, port = controller.progress.url.removeprefix("https://").rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(controller.progress.ca_file))
    stop = threading.Event()
    sent = [0]

    def fuzz() -> None:
        while not stop.is_set():
            try:
                with socket.create_connection((host, int(port)), timeout=5) as raw:
                    with ctx.wrap_socket(raw, server_hostname=host) as s:
                        s.sendall(garbage(rng, token, path(namespace, "mnist")))
                        s.settimeout(2)
                        s.recv(4096)
            except OSError:
                pass
            sent[0] += 1

    threads = [threading.Thread(target=fuzz, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    slowest = 0.0
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            with urllib.request.urlopen(
                f"http://127.0.0.1:{controller.health_port}/healthz", timeout=5
            ) as resp:
                assert resp.status == 200
            slowest = max(slowest, time.monotonic() - t0)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert sent[0] > 100, sent
    assert slowest < 1.0, slowest
    r = Reporter(controller)
    try:
        assert r.post(path(namespace, "mnist"), token, b'{"step": 3}')[0] in (204, 429)
    finally:
        r.close()
    assert controller.proc is not None and controller.proc.poll() is None


def garbage(rng: random.Random, token: str, good_path: str) -> bytes:
    """A request that is almost right, or not at all."""
    docs = [
        b'{"step": 1}',
        b'{"step": -5}',
        b"{",
        b'{"metrics": {"a": 1}}',
        b'{"step": %d}' % rng.randrange(10**20),
        bytes(rng.randrange(256) for _ in range(rng.randrange(64))),
        orjson.dumps({"step": 1, "metrics": {f"m{i}": i for i in range(rng.randrange(30))}}),
    ]
    body = rng.choice(docs)
    heads = [
        f"POST {good_path} HTTP/1.1\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n",
        f"POST {good_path} HTTP/1.1\r\nContent-Length: {len(body) + rng.randrange(5)}\r\n\r\n",
        f"GET {good_path} HTTP/1.1\r\n\r\n",
        f"POST /{'x' * rng.randrange(9000)} HTTP/1.1\r\n\r\n",
        f"POST {good_path} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "\x00\x01garbage\r\n\r\n",
    ]
    return rng.choice(heads).encode("latin-1") + body


def resigned(cluster: Cluster, token: str, *, exp_in: int) -> str:
    """``token`` with its expiry moved, signed again with the cluster's service-account
    key: a token the apiserver issued in every respect but its age."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding

    head, claims_b64, _sig = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(claims_b64 + "=" * (-len(claims_b64) % 4)))
    now = int(time.time())
    claims.update(exp=now + exp_in, iat=now - 700, nbf=now - 700)
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    key = serialization.load_pem_private_key((cluster.dir / "pki" / "sa.key").read_bytes(), None)
    signed = f"{head}.{body}".encode()
    sig = key.sign(signed, padding.PKCS1v15(), hashes.SHA256())  # type: ignore[union-attr,call-arg]
    return f"{head}.{body}." + base64.urlsafe_b64encode(sig).rstrip(b"=").decode()


def test_an_immutable_ca_configmap_someone_else_made_is_reported_on_the_job(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    """A tenant's own immutable tfjob-progress-ca: the apiserver refuses every patch
    (422), so the controller says so on the job, once, instead of retrying for ever."""
    kube.req(
        "POST",
        f"/api/v1/namespaces/{namespace}/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "tfjob-progress-ca"},
            "data": {"ca.crt": "not our CA"},
            "immutable": True,
        },
    )
    kube.create_tfjob(namespace, job("squatted", 1))
    warned = wait_for(
        lambda: [e for e in kube.events(namespace) if e["reason"] == "ProgressCABundleRefused"],
        30,
        "the ProgressCABundleRefused event",
    )
    (event,) = warned
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "squatted"
    assert "immutable" in event["message"] and event.get("count", 1) == 1, event
    cm = kube.req("GET", f"/api/v1/namespaces/{namespace}/configmaps/tfjob-progress-ca")
    assert cm["data"]["ca.crt"] == "not our CA"
