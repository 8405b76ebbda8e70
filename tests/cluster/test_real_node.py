"""TFJobs whose pods run as real processes: the local cluster's real node (containerd,
runc, kubelet, cluster DNS; hack/cluster/node.py) beside the kwok nodes.

What kwok cannot show: workers finding each other through TF_CONFIG's headless-service
names before any of them is Ready, in-place container restarts counted against
backoffLimit, exit codes of real processes (1, and 137 from a SIGKILL), logs through
kubectl and the SDK, and what a failed job does with pods its kubelet keeps restarting.
"""

from __future__ import annotations

import json
import os
import random
import signal
import textwrap
from typing import Any

import pytest
from kubeflow.training import TrainingClient

from hack.cluster import node as real_node_mod
from tests.cluster.kube import ControllerProcess, Kube, PodHistory, live, wait_for, wait_job
from tests.cluster.policy_helpers import rs
from tests.cluster.test_chaos import DELETE, SIGKILL, Model
from tests.conftest import Cluster

#: needs the local cluster (it adds the real node to it), and root
pytestmark = pytest.mark.local_only

#: Every worker listens on its own TF_CONFIG port, then for each peer resolves its
#: name (retrying until cluster DNS has it), connects, sends its index and reads an ack:
#: a stand-in for MultiWorkerMirroredStrategy's rendezvous. Ready only afterwards (the
#: readiness probe below), so the peers' addresses are published while not Ready.
RENDEZVOUS = textwrap.dedent(
    """
    import json, os, socket, sys, threading, time
    tf = json.loads(os.environ["TF_CONFIG"])
    me, peers = tf["task"]["index"], tf["cluster"]["worker"]
    print(f"worker {me}: TF_CONFIG {json.dumps(tf, sort_keys=True)}", flush=True)
    srv = socket.create_server(("0.0.0.0", int(peers[me].rsplit(":", 1)[1])))
    heard = set()
    def serve():
        while len(heard) < len(peers) - 1:
            conn, _ = srv.accept()
            with conn:
                heard.add(conn.recv(64).decode())
                conn.sendall(f"ack from {me}".encode())
    threading.Thread(target=serve, daemon=True).start()
    for i, addr in enumerate(peers):
        if i == me:
            continue
        host, port = addr.rsplit(":", 1)
        deadline = time.monotonic() + 90
        while True:
            try:
                ip = socket.gethostbyname(host)
                with socket.create_connection((ip, int(port)), timeout=5) as c:
                    c.sendall(str(me).encode())
                    print(f"worker {me}: {host} is {ip}; {c.recv(64).decode()}", flush=True)
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    sys.exit(f"worker {me}: no answer from {addr}: {e}")
                time.sleep(0.2)
    while len(heard) < len(peers) - 1:
        time.sleep(0.05)
    open("/tmp/ready", "w").close()
    print(f"worker {me}: heard from {sorted(heard)}", flush=True)
    """
)


def real_template(script: str, **container: Any) -> dict[str, Any]:
    return {
        "spec": {
            "nodeSelector": dict(real_node_mod.NODE_LABELS),
            "tolerations": [{**real_node_mod.REAL_NODE_TAINT, "operator": "Equal"}],
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "tensorflow",
                    "image": real_node_mod.WORKLOAD_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-u", "-c", script],
                    **container,
                }
            ],
        }
    }


def real_job(
    name: str, script: str, *, workers: int, restart_policy: str, **run_policy: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "tfReplicaSpecs": {
            "Worker": {
                "replicas": workers,
                "restartPolicy": restart_policy,
                "template": real_template(script),
            }
        }
    }
    if run_policy:
        spec["runPolicy"] = run_policy
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": spec,
    }


def container_status(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((s for s in statuses if s["name"] == "tensorflow"), {})


def logs(cluster: Cluster, ns: str, pod: str, *extra: str) -> str:
    return cluster.kubectl("logs", "-n", ns, pod, "-c", "tensorflow", *extra)


def test_workers_rendezvous_through_tf_config(
    real_node: str, controller: ControllerProcess, kube: Kube, cluster: Cluster, namespace: str
) -> None:
    ns = namespace
    job = real_job("rdv", RENDEZVOUS, workers=2, restart_policy="Never")
    probe = {"exec": {"command": ["test", "-f", "/tmp/ready"]}, "periodSeconds": 1}
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "readinessProbe"
    ] = probe
    kube.create_tfjob(ns, job)
    done = wait_job(kube, ns, "rdv", "Succeeded", timeout=120)
    assert rs(done, "Worker")["succeeded"] == 2
    ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in kube.pods(ns, "rdv")}
    assert all(p["spec"]["nodeName"] == real_node for p in kube.pods(ns, "rdv"))
    for i, peer in ((0, 1), (1, 0)):
        out = logs(cluster, ns, f"rdv-worker-{i}")
        tf_config = json.loads(out.splitlines()[0].split("TF_CONFIG ", 1)[1])
        assert tf_config["task"] == {"type": "worker", "index": i}
        assert tf_config["cluster"]["worker"] == [
            f"rdv-worker-0.{ns}.svc:2222",
            f"rdv-worker-1.{ns}.svc:2222",
        ]
        # the name resolved, through our headless service, to the peer pod's own address
        assert f"rdv-worker-{peer}.{ns}.svc is {ips[f'rdv-worker-{peer}']}; ack from {peer}" in out
        assert f"heard from ['{peer}']" in out

    # The SDK reads the same logs (its master pod is worker 0 when there is no chief).
    tc = TrainingClient(config_file=cluster.kubeconfig, namespace=ns, job_kind="TFJob")
    got, _ = tc.get_job_logs("rdv", is_master=False)
    assert sorted(got) == ["rdv-worker-0", "rdv-worker-1"]
    assert all("heard from" in text for text in got.values())


def test_on_failure_restarts_in_place_count_against_backoff_limit(
    real_node: str, controller: ControllerProcess, kube: Kube, cluster: Cluster, namespace: str
) -> None:
    """The kubelet restarts the failing container in the same pod; each restart counts
    toward backoffLimit, and past it the job fails with upstream's message. Then the
    pod, which its kubelet would restart forever, is stopped (cleanPodPolicy None)."""
    ns = namespace
    script = "import sys; print('attempt', flush=True); sys.exit(1)"
    with PodHistory(cluster, ns) as history:
        kube.create_tfjob(
            ns, real_job("crash", script, workers=1, restart_policy="OnFailure", backoffLimit=2)
        )
        failed = wait_job(kube, ns, "crash", "Failed", timeout=120)
        pods = kube.pods(ns, "crash")
    cond = next(c for c in failed["status"]["conditions"] if c["type"] == "Failed")
    assert (
        cond["message"] == "Job crash has failed because it has reached the specified backoff limit"
    )
    assert rs(failed, "Worker")["restarts"] >= 3  # past the limit of 2
    # the same pod all along: restarted in place, never replaced (the watch saw every
    # pod of the namespace made, from before the job was)
    made = {uid for type_, _, uid in history.events if type_ == "ADDED"}
    assert len(made) == 1 and {p["metadata"]["uid"] for p in pods} <= made
    # ... and stopped once the job failed, although cleanPodPolicy is None
    wait_for(lambda: kube.pods(ns, "crash") == [], 30, "the crash-looping pod stopped")


def _container_pid(cluster: Cluster, ns: str, pod: str) -> int:
    """The host PID of the pod's tensorflow container, through CRI."""
    state = json.loads((cluster.dir / "state.json").read_text())
    found = real_node_mod.crictl(
        cluster.dir,
        state,
        "ps",
        "-q",
        "--name",
        "tensorflow",
        "--label",
        f"io.kubernetes.pod.name={pod}",
        "--label",
        f"io.kubernetes.pod.namespace={ns}",
    )
    assert found, f"no running container for {ns}/{pod}"
    info = real_node_mod.crictl(cluster.dir, state, "inspect", found.split()[0])
    assert info is not None
    return int(json.loads(info)["info"]["pid"])


def test_exit_codes_of_real_processes(
    real_node: str, controller: ControllerProcess, kube: Kube, cluster: Cluster, namespace: str
) -> None:
    """ExitCode: a SIGKILL (137) is retryable, so the pod is replaced; exit 1 is
    permanent and fails the job. Both codes come from the kernel and the runtime."""
    ns = namespace
    script = textwrap.dedent(
        """
        import os, sys, time
        print("up", flush=True)
        while not os.path.exists("/tmp/fail"):
            time.sleep(0.1)
        sys.exit(1)
        """
    )
    kube.create_tfjob(ns, real_job("codes", script, workers=1, restart_policy="ExitCode"))

    def running_pod() -> dict[str, Any] | None:
        pod = kube.pod(ns, "codes-worker-0")
        return pod if pod and container_status(pod).get("state", {}).get("running") else None

    first = wait_for(running_pod, 60, "worker running")
    os.kill(_container_pid(cluster, ns, "codes-worker-0"), signal.SIGKILL)
    second = wait_for(
        lambda: (p := running_pod()) and p["metadata"]["uid"] != first["metadata"]["uid"] and p,
        60,
        "worker replaced after the SIGKILL",
    )
    job = kube.tfjob(ns, "codes")
    assert job is not None and rs(job, "Worker")["restarts"] == 1
    cluster.kubectl(
        "exec", "-n", ns, "codes-worker-0", "-c", "tensorflow", "--", "touch", "/tmp/fail"
    )
    failed = wait_job(kube, ns, "codes", "Failed", timeout=60)
    assert rs(failed, "Worker")["failed"] == 1
    pod = kube.pod(ns, "codes-worker-0")
    assert pod is not None and pod["metadata"]["uid"] == second["metadata"]["uid"]
    assert container_status(pod)["state"]["terminated"]["exitCode"] == 1
    assert logs(cluster, ns, "codes-worker-0").strip() == "up"


#: A worker of the chaos round: runs until the test writes an exit code to /tmp/exit.
WAIT_FOR_EXIT = textwrap.dedent(
    """
    import os, sys, time
    print("up", flush=True)
    while not os.path.exists("/tmp/exit"):
        time.sleep(0.1)
    sys.exit(int(open("/tmp/exit").read()))
    """
)
CHAOS_SEED = 20261204
CHAOS_KILLS = 8


def test_chaos_round_on_real_processes(
    real_node: str, controller: ControllerProcess, kube: Kube, cluster: Cluster, namespace: str
) -> None:
    """Seeded kills of real pods (deleted by someone else: disruptions) and of real
    container processes (SIGKILL from the host: exit 137, a retry: restarted in place by
    the kubelet under OnFailure, replaced by us under ExitCode). As in the chaos suite:
    no index ever has two live pods, each job's restarts and disruptions are exactly
    what its kills must have caused, and each job still Succeeds at the end."""
    ns = namespace
    rng = random.Random(CHAOS_SEED)
    models = [
        Model("onf", real_job("onf", WAIT_FOR_EXIT, workers=2, restart_policy="OnFailure")),
        Model("exc", real_job("exc", WAIT_FOR_EXIT, workers=2, restart_policy="ExitCode")),
    ]
    plan = [
        (rng.choice(models), rng.randrange(2), rng.choice([DELETE, SIGKILL]))
        for _ in range(CHAOS_KILLS)
    ]
    killed: set[str] = set()

    def running(m: Model, index: int) -> dict[str, Any] | None:
        """The pod once it is a fair target: its container running, not killed in this
        incarnation, and every earlier kill of the job accounted in its status."""
        pod = kube.pod(ns, f"{m.name}-worker-{index}")
        if not pod or not live(pod) or not container_status(pod).get("state", {}).get("running"):
            return None
        if incarnation(pod) in killed:
            return None
        got = rs(kube.tfjob(ns, m.name), "Worker")
        want = (m.restarts.get("Worker", 0), m.disruptions.get("Worker", 0))
        return pod if (got["restarts"], got["disruptions"]) == want else None

    with PodHistory(cluster, ns) as history:
        for m in models:
            kube.create_tfjob(ns, m.body)
        for m, index, kind in plan:
            name = f"{m.name}-worker-{index}"
            pod = wait_for(lambda: running(m, index), 90, f"{name} running")  # noqa: B023
            killed.add(incarnation(pod))
            if kind == DELETE:
                kube.delete_pod(ns, name)
            else:
                os.kill(_container_pid(cluster, ns, name), signal.SIGKILL)
            m.kill("Worker", kind, ns)
        for m in models:
            for index in range(2):
                wait_for(lambda: running(m, index), 90, f"{m.name}-worker-{index} back")  # noqa: B023
            exec_write(cluster, ns, f"{m.name}-worker-0", "/tmp/exit", "0")
        finals = {m.name: wait_job(kube, ns, m.name, "Succeeded", timeout=60) for m in models}
    assert history.violations == []
    kinds = {kind for _, _, kind in plan}
    assert kinds == {DELETE, SIGKILL} and {m.name for m, _, _ in plan} == {"onf", "exc"}
    for m in models:
        got = rs(finals[m.name], "Worker")
        want = (m.restarts.get("Worker", 0), m.disruptions.get("Worker", 0), 0)
        assert (got["restarts"], got["disruptions"], got["failed"]) == want, m.name


def incarnation(pod: dict[str, Any]) -> str:
    """A pod's container run: its UID and the container's restart count."""
    return f"{pod['metadata']['uid']}/{container_status(pod).get('restartCount', 0)}"


def exec_write(cluster: Cluster, ns: str, pod: str, path: str, text: str) -> None:
    script = f"open({path!r}, 'w').write({text!r})"
    cluster.kubectl("exec", "-n", ns, pod, "-c", "tensorflow", "--", "python3", "-c", script)


def test_down_removes_the_node_and_leaves_nothing(real_node: str, cluster: Cluster) -> None:
    """`down --real-node` (what `down` does first): no process, mount, bridge or
    firewall rule of the node is left, and the Node is gone; `up --real-node` brings it
    back Ready. (Last in this module: the ones above ran pods on the node.)"""
    cluster._hack("down", "--real-node")
    assert real_node_mod.leftovers(cluster.dir) == []
    assert cluster.api.request("GET", f"/api/v1/nodes/{real_node}")[0] == 404
    cluster._hack("up", "--real-node")
    assert real_node_mod.node_ready(cluster.api)
