"""hack/image-test.sh's last step: the controller running in its container does its job.

Checks that the container runs as the Deployment asks (user 65532, read-only root
filesystem, no capabilities), that /readyz answers 200 once it is the leader, then
creates the sample TFJob config/samples/tfjob-workers.yaml under a fresh name, lets
worker 0 exit 0 once both workers run (kwok has no processes), and waits for the job to
Succeed; last, /metrics (HTTPS, refused without a token) must show the reconciles and
the job counted. Exits non-zero saying what did not happen.
"""

from __future__ import annotations

import argparse
import json
import re
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import yaml

import hack.cluster as cluster_mod
from hack.run_local import NS, TFJOBS, finish_when_running, finished, summary

REPO = cluster_mod.REPO


def say(msg: str) -> None:
    print(f"[image-check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def http_get(url: str, token: str = "") -> tuple[int, str]:
    """GET ``url``; over HTTPS the certificate is not verified (the controller's own,
    made for the first scrape) and ``token`` is sent as a bearer token."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    context = ssl._create_unverified_context() if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=5, context=context
        ) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError as e:
        return 0, str(e)


def container(name: str) -> dict[str, object]:
    out = subprocess.run(["docker", "inspect", name], check=True, capture_output=True, text=True)
    info: dict[str, object] = json.loads(out.stdout)[0]
    return info


def check_confinement(name: str) -> None:
    info = container(name)
    host = info["HostConfig"]
    cfg = info["Config"]
    assert isinstance(host, dict) and isinstance(cfg, dict)
    want = {
        "user": (cfg.get("User"), "65532:65532"),
        "read-only root filesystem": (host.get("ReadonlyRootfs"), True),
        "capabilities dropped": (host.get("CapDrop"), ["ALL"]),
        "no-new-privileges": ("no-new-privileges" in (host.get("SecurityOpt") or []), True),
    }
    for what, (got, expect) in want.items():
        if got != expect:
            raise SystemExit(f"container {name}: {what} is {got!r}, want {expect!r}")
    say("container runs as 65532, read-only root filesystem, capabilities dropped")


def wait_ready(name: str, probes: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    status, body = 0, ""
    while time.monotonic() < deadline:
        state = container(name)["State"]
        assert isinstance(state, dict)
        if not state.get("Running"):
            raise SystemExit(f"container {name} exited with {state.get('ExitCode')}")
        status, body = http_get(probes + "/readyz")
        if status == 200:
            say("/readyz: 200")
            return
        time.sleep(0.5)
    raise SystemExit(f"/readyz did not answer 200 in {timeout:g} s: last {status} {body!r}")


def run_sample(api: cluster_mod.Api, name: str, timeout: float = 180) -> None:
    doc = yaml.safe_load((REPO / "config" / "samples" / "tfjob-workers.yaml").read_text())
    doc["metadata"] = {"name": name, "namespace": NS}
    status, body = api.request("POST", TFJOBS, doc)
    if status != 201:
        raise SystemExit(f"could not create TFJob {name}: {status} {body}")
    say(f"created TFJob {NS}/{name}")
    last = ""
    finishing = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, job = api.request("GET", f"{TFJOBS}/{name}")
        line = summary(job)
        if line != last:
            say(line)
            last = line
        if finished(job):
            conds = [c["type"] for c in job["status"]["conditions"] if c["status"] == "True"]
            if "Succeeded" not in conds:
                raise SystemExit(f"TFJob {name} finished without succeeding: {conds}")
            return
        if not finishing:
            finishing = bool(finish_when_running(api, job))
        time.sleep(0.3)
    raise SystemExit(f"TFJob {name} did not succeed in {timeout:g} s: {last}")


def check_metrics(metrics: str, token: str) -> None:
    """Secure metrics as deployed: refused without a token, served with one whose user
    may get /metrics."""
    if token:
        status, _ = http_get(metrics + "/metrics")
        if status != 401:
            raise SystemExit(f"/metrics without a token answered {status}, not 401")
    status, text = http_get(metrics + "/metrics", token)
    if status != 200:
        raise SystemExit(f"/metrics answered {status}")
    for family in ("controller_runtime_reconcile_total", "training_operator_jobs_successful"):
        sample = re.compile(rf"^{family}(?:_total)?(?:{{[^}}]*}})? (\S+)$", re.M)
        if not any(float(v) > 0 for v in sample.findall(text)):
            raise SystemExit(f"/metrics has no non-zero {family}")
    say(
        "/metrics: "
        + ("401 without a token, 200 with the scraper's; " if token else "200, ")
        + "reconciles and the successful job counted"
    )


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--container", required=True)
    p.add_argument("--metrics", required=True, help="base URL of the metrics listener")
    p.add_argument("--probes", required=True, help="base URL of the probe listener")
    p.add_argument("--token-file", default="", help="a bearer token that may get /metrics")
    args = p.parse_args()
    d = cluster_mod.cluster_dir()
    state = cluster_mod.load_state(d)
    if not state:
        say(f"no local cluster in {d}")
        return 1
    api = cluster_mod.Api(d, state["ports"]["apiserver"])
    check_confinement(args.container)
    wait_ready(args.container, args.probes)
    name = f"image-test-{uuid.uuid4().hex[:6]}"
    run_sample(api, name)
    token = Path(args.token_file).read_text().strip() if args.token_file else ""
    check_metrics(args.metrics, token)
    api.request("DELETE", f"{TFJOBS}/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
