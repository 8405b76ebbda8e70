"""`make run`: the controller on the local cluster with the sample TFJobs.

Starts tfjob-controller against .cluster/kubeconfig (TFJOB_CLUSTER_DIR picks another
cluster), applies the sample TFJobs in config/samples/ to the namespace `default`,
prints each job's progress (conditions and replica counts) as it changes, finishes the
training pods the way a real kubelet would report a clean exit (kwok has no real
processes), and once every job has finished prints each one's outcome, stops the
controller and exits: 0 when every sample Succeeded. The cluster stays up for the next
command. Ctrl-C stops early. The controller's own log goes to
<cluster>/logs/tfjob-controller.log; on a failure its last lines are printed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

import hack.cluster as cluster_mod
from hack.cluster.pki import ensure_serving_cert

REPO = cluster_mod.REPO

NS = "default"
TFJOBS = f"/apis/kubeflow.org/v1/namespaces/{NS}/tfjobs"


def say(msg: str) -> None:
    print(f"[run {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def summary(job: dict[str, Any]) -> str:
    st = job.get("status") or {}
    conds = [c for c in st.get("conditions") or [] if c.get("status") == "True"]
    state = conds[-1]["type"] if conds else "Pending"
    reps = ", ".join(
        f"{rt}: active={r.get('active', 0)} succeeded={r.get('succeeded', 0)} "
        f"failed={r.get('failed', 0)}"
        for rt, r in sorted((st.get("replicaStatuses") or {}).items())
    )
    line = f"{job['metadata']['name']}: {state}" + (f" ({reps})" if reps else "")
    tp = st.get("trainingProgress")
    return f"{line}; {training(tp)}" if tp else line


def training(tp: dict[str, Any]) -> str:
    """status.trainingProgress in a few words (docs/progress.md)."""
    parts = [f"{tp['percent']}%"] if tp.get("percent") is not None else []
    if tp.get("step") is not None:
        parts.append(
            f"step {tp['step']}" + (f"/{tp['totalSteps']}" if tp.get("totalSteps") else "")
        )
    if tp.get("epoch") is not None:
        parts.append(
            f"epoch {tp['epoch']}" + (f"/{tp['totalEpochs']}" if tp.get("totalEpochs") else "")
        )
    parts += [f"{k} {v:.4g}" for k, v in sorted((tp.get("metrics") or {}).items())]
    if tp.get("estimatedRemaining"):
        parts.append(f"ETA {tp['estimatedRemaining']}")
    return f"progress ({tp.get('reporter', '?')}): " + ", ".join(parts)


def progress_flags(pki: Path) -> list[str]:
    """The training-progress endpoint (docs/progress.md) of a controller run on this
    host: pods on the real node reach it at the host's address, through their bridge;
    its certificate is signed by the CA in ``pki`` (the local cluster's)."""
    ip = cluster_mod.node.node_ip()
    ensure_serving_cert(pki, "progress", ["127.0.0.1", ip], ["localhost"])
    return progress_args(ip, cluster_mod.free_port(), pki)


def progress_args(ip: str, port: int, pki: Path) -> list[str]:
    return [
        f"--progress-url=https://{ip}:{port}",
        f"--progress-bind-address=:{port}",
        f"--progress-cert-file={pki / 'progress.crt'}",
        f"--progress-key-file={pki / 'progress.key'}",
        f"--progress-ca-file={pki / 'ca.crt'}",
    ]


def finished(job: dict[str, Any]) -> bool:
    return any(
        c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def outcome(job: dict[str, Any]) -> str:
    """Succeeded, Failed (with its reason and message) or the state it was left in."""
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True":
            why = ": ".join(x for x in (c.get("reason"), c.get("message")) if x)
            return c["type"] if c["type"] == "Succeeded" else f"Failed ({why})"
    return "not finished"


#: how long `make run` waits for its samples (kwok pods: seconds in the ordinary run)
TIMEOUT = 300.0
#: lines of the controller's log printed when a run fails
LOG_TAIL = 30


def log_tail(path: Path, lines: int = LOG_TAIL) -> str:
    """The last ``lines`` lines of the log at ``path``, for a failure's report."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 256 * 1024))
            text = f.read().decode(errors="replace")
    except OSError as e:
        return f"(no log: {e})"
    return "\n".join(text.splitlines()[-lines:])


def fail(msg: str, log: Path) -> int:
    say(f"{msg}; the last lines of {log}:")
    print(log_tail(log), flush=True)
    return 1


def main() -> int:
    d = cluster_mod.cluster_dir()
    state = cluster_mod.load_state(d)
    if not state:
        say("no local cluster: run `hack/cluster.sh up` (make run does it for you)")
        return 1
    api = cluster_mod.Api(d, state["ports"]["apiserver"])
    kubeconfig = d / "kubeconfig"
    log = controller_log(d)
    ctrl = start_controller(d)
    names = []
    try:
        for f in sorted((REPO / "config" / "samples").glob("*.yaml")):
            for doc in yaml.safe_load_all(f.read_text()):
                if not doc or doc.get("kind") != "TFJob":
                    continue
                name = doc["metadata"]["name"]
                delete_tfjob(api, name)
                if not create_tfjob(api, doc):
                    return fail(f"could not create {name}", log)
                names.append(name)
                say(f"applied TFJob {NS}/{name} from {f.relative_to(REPO)}")
        last: dict[str, str] = {}
        jobs: dict[str, dict[str, Any]] = {}
        finishing: set[str] = set()
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if ctrl.poll() is not None:
                return fail(f"controller exited with {ctrl.returncode}", log)
            for name in names:
                status, job = api.request("GET", f"{TFJOBS}/{name}")
                if status != 200:
                    continue
                jobs[name] = job
                line = summary(job)
                if last.get(name) != line:
                    say(line)
                    last[name] = line
                if not finished(job) and name not in finishing:
                    finishing |= finish_when_running(api, job)
            if len(jobs) == len(names) and all(finished(j) for j in jobs.values()):
                break
            time.sleep(0.5)
        else:
            for name in names:
                say(f"  {name}: {outcome(jobs.get(name, {}))}")
            return fail(f"timed out after {TIMEOUT:g}s waiting for the sample jobs", log)
        say("every sample job has finished; pods and services:")
        for kind in ("pods", "services"):
            _, lst = api.request(
                "GET",
                f"/api/v1/namespaces/{NS}/{kind}?labelSelector="
                "training.kubeflow.org/operator-name%3Dtfjob-controller",
            )
            for item in lst.get("items", []):
                phase = item.get("status", {}).get("phase", "")
                print(f"    {kind[:-1]:8s} {item['metadata']['name']:32s} {phase}")
        say("outcomes:")
        for name in names:
            say(f"  {NS}/{name}: {outcome(jobs[name])}")
        if not all(outcome(jobs[n]) == "Succeeded" for n in names):
            return fail("not every sample Succeeded", log)
        say(
            "the cluster stays up (`make cluster-down` takes it down); run the controller"
            f" yourself with .venv/bin/tfjob-controller --kubeconfig {kubeconfig}"
        )
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        stop_controller(ctrl)


def delete_tfjob(api: cluster_mod.Api, name: str) -> None:
    """The TFJob ``name`` in NS gone, with its pods, if there was one."""
    api.request("DELETE", f"{TFJOBS}/{name}", {"propagationPolicy": "Foreground"})
    deadline = time.monotonic() + 60
    while api.request("GET", f"{TFJOBS}/{name}")[0] == 200:
        if time.monotonic() > deadline:
            raise SystemExit(f"old TFJob {name} is not going away")
        time.sleep(0.3)


def create_tfjob(api: cluster_mod.Api, doc: dict[str, Any]) -> bool:
    """``doc`` created in NS; False (said) when the apiserver refuses it."""
    body = {**doc, "metadata": {**doc["metadata"], "namespace": NS}}
    status, answer = api.request("POST", TFJOBS, body)
    if status != 201:
        say(f"could not create {doc['metadata']['name']}: {status} {answer}")
    return status == 201


def controller_log(d: Path) -> Path:
    return d / "logs" / "tfjob-controller.log"


def controller_argv(exe: str, d: Path, progress: list[str]) -> list[str]:
    """How `make run` and `make run-tf` start the controller against the cluster in
    ``d``: /metrics as deployed (HTTPS, a token needed) and the probes each on an
    ephemeral port of its own, the progress endpoint with ``progress``'s flags."""
    return [
        exe,
        f"--kubeconfig={d / 'kubeconfig'}",
        "--log-format=json",
        "--metrics-bind-address=127.0.0.1:0",
        "--health-probe-bind-address=127.0.0.1:0",
        *progress,
    ]


def start_controller(d: Path) -> subprocess.Popen[bytes]:
    """tfjob-controller against the cluster in ``d``, its log in d/logs."""
    log = controller_log(d)
    exe = REPO / ".venv" / "bin" / "tfjob-controller"
    with open(log, "ab") as logf:
        ctrl = subprocess.Popen(
            controller_argv(
                str(exe) if exe.exists() else "tfjob-controller", d, progress_flags(d / "pki")
            ),
            stdout=logf,
            stderr=subprocess.STDOUT,
        )
    say(f"controller started (pid {ctrl.pid}); log: {log}")
    return ctrl


def stop_controller(ctrl: subprocess.Popen[bytes]) -> None:
    if ctrl.poll() is None:
        ctrl.send_signal(signal.SIGTERM)
        try:
            ctrl.wait(20)
        except subprocess.TimeoutExpired:
            ctrl.kill()


def finish_when_running(api: cluster_mod.Api, job: dict[str, Any]) -> set[str]:
    """Once all of a job's pods run, let the deciding pod exit 0 (chief, else worker-0)."""
    name = job["metadata"]["name"]
    _, lst = api.request(
        "GET",
        f"/api/v1/namespaces/{NS}/pods?labelSelector=training.kubeflow.org/job-name%3D{name}",
    )
    pods = lst.get("items", [])
    want = sum(int(s.get("replicas", 1)) for s in job["spec"]["tfReplicaSpecs"].values())
    if len(pods) < want or any(p.get("status", {}).get("phase") != "Running" for p in pods):
        return set()
    roles = [
        p for p in pods if p["metadata"]["labels"].get("training.kubeflow.org/job-role") == "master"
    ]
    for p in roles[:1]:
        say(f"all pods of {name} run; letting {p['metadata']['name']} exit 0")
        api.request(
            "PATCH",
            f"/api/v1/namespaces/{NS}/pods/{p['metadata']['name']}",
            {"metadata": {"annotations": {"kwok.test/exit-code": "0"}}},
            content_type="application/merge-patch+json",
        )
    return {name} if roles else set()


if __name__ == "__main__":
    sys.exit(main())
