"""`make run-tf`: real TensorFlow training on the local cluster's real node, in one command.

Starts tfjob-controller against the local cluster (brought up with the real node and the
TensorFlow image by `make run-tf`), puts the training programs of tests/tf/programs/ in
the ConfigMap tf-programs, applies config/samples/tf/tfjob-mwms.yaml to the namespace
`default` (a MultiWorkerMirroredStrategy job of two workers, with whole-gang restart and
a backup on the node), then prints the job's status as it changes (with the training
progress its workers report, docs/progress.md) and the training's progress lines from
worker 0's log, until the job has finished. Its exit status says
how: 0 Succeeded. The controller's log goes to <cluster>/logs/tfjob-controller.log; on
a failure its last lines are printed.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from typing import Any
from urllib.parse import quote

import yaml

import hack.cluster as cluster_mod
from hack.run_local import (
    NS,
    TFJOBS,
    controller_log,
    create_tfjob,
    delete_tfjob,
    fail,
    finished,
    outcome,
    say,
    start_controller,
    stop_controller,
    summary,
)

REPO = cluster_mod.REPO
SAMPLE = REPO / "config" / "samples" / "tf" / "tfjob-mwms.yaml"
PROGRAMS = REPO / "tests" / "tf" / "programs"
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"
#: hostPath directories of the sample, emptied so each run trains from the start
HOST_DIRS = ("/var/tmp/tfjob-samples/mwms",)
TIMEOUT = 600


def fresh_job(api: cluster_mod.Api, doc: dict[str, Any]) -> bool:
    """The sample created afresh: the old job gone, then its backup (a run of the sample
    trains from the start)."""
    delete_tfjob(api, doc["metadata"]["name"])
    for d in HOST_DIRS:
        shutil.rmtree(d, ignore_errors=True)
    return create_tfjob(api, doc)


def progress_lines(api: cluster_mod.Api, pod: str) -> list[dict[str, Any]]:
    """The training program's progress lines in the pod's log so far ([] before it runs)."""
    status, text = api.request(
        "GET", f"/api/v1/namespaces/{NS}/pods/{quote(pod)}/log?container=tensorflow"
    )
    if status != 200 or not isinstance(text, str):
        return []
    out = []
    for line in text.splitlines():
        if line.startswith('{"tfjob_progress"'):
            out.append(json.loads(line)["tfjob_progress"])
    return out


def describe(x: dict[str, Any]) -> str:
    fields = " ".join(f"{k}={v}" for k, v in x.items() if k not in ("event", "task"))
    return f"  {x.get('task', '?')} {x['event']}: {fields}"


def main() -> int:
    d = cluster_mod.cluster_dir()
    state = cluster_mod.load_state(d)
    if not state or "real_node" not in state:
        say("no local cluster with the real node: `make run-tf` brings one up")
        return 1
    api = cluster_mod.Api(d, state["ports"]["apiserver"])
    doc = yaml.safe_load(SAMPLE.read_text())
    name = doc["metadata"]["name"]
    log = controller_log(d)
    ctrl = start_controller(d)
    try:
        data = {p.name: p.read_text() for p in sorted(PROGRAMS.glob("*.py"))}
        # the reporting helper, as a user would copy it next to their program
        data["tfjob_progress.py"] = (REPO / "tfjob_controller" / "progress.py").read_text()
        api.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "tf-programs"},
                "data": data,
            },
            CONFIGMAPS,
        )
        if not fresh_job(api, doc):
            return fail(f"could not create {name}", log)
        say(f"applied TFJob {NS}/{name} from {SAMPLE.relative_to(REPO)}; worker 0's progress:")
        last, shown, pod_uid = "", 0, None
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if ctrl.poll() is not None:
                return fail(f"controller exited with {ctrl.returncode}", log)
            status, job = api.request("GET", f"{TFJOBS}/{name}")
            if status != 200:
                time.sleep(0.5)
                continue
            line = summary(job)
            if line != last:
                say(line)
                last = line
            pod = f"{name}-worker-0"
            _, obj = api.request("GET", f"/api/v1/namespaces/{NS}/pods/{pod}")
            uid = (obj or {}).get("metadata", {}).get("uid") if isinstance(obj, dict) else None
            if uid != pod_uid:
                shown, pod_uid = 0, uid  # a new pod (a gang restart): its log from the start
            lines = progress_lines(api, pod)
            for x in lines[shown:]:
                print(describe(x), flush=True)
            shown = max(shown, len(lines))
            if finished(job):
                result = outcome(job)
                if result != "Succeeded":
                    return fail(f"{NS}/{name}: {result}", log)
                say(
                    f"{NS}/{name}: {result}; the cluster stays up"
                    " (`make cluster-down` takes it down)"
                )
                return 0
            time.sleep(1)
        return fail(f"timed out after {TIMEOUT}s waiting for {name}", log)
    except KeyboardInterrupt:
        return 130
    finally:
        stop_controller(ctrl)


if __name__ == "__main__":
    sys.exit(main())
