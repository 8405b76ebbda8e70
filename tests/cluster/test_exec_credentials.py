"""A kubeconfig whose user is an exec credential plugin with short-lived tokens, as
managed clusters' are: the controller runs the plugin again as each token expires and
keeps working across expiries."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import pytest
import yaml

from tests.cluster.kube import (
    ControllerProcess,
    Kube,
    sample,
    wait_for,
    wait_job,
    wait_namespaces_gone,
    wait_running,
)
from tests.cluster.test_rbac import SA_NS, apply_controller_rbac
from tests.conftest import REPO, Cluster

#: needs kwok pods that exit on the test's say
pytestmark = pytest.mark.local_only

PLUGIN = REPO / "tests" / "cluster" / "plugins" / "sa_token_exec.py"
LIFE = 15  # seconds the plugin says each token lives


def exec_kubeconfig(cluster: Cluster, path: Path, log: Path) -> None:
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    server = admin["clusters"][0]["cluster"]["server"]
    pki = cluster.dir / "pki"
    env = {
        "TFJOB_PLUGIN_SERVER": server,
        "TFJOB_PLUGIN_CA": str(pki / "ca.crt"),
        "TFJOB_PLUGIN_CERT": str(pki / "admin.crt"),
        "TFJOB_PLUGIN_KEY": str(pki / "admin.key"),
        "TFJOB_PLUGIN_SA": f"{SA_NS}/tfjob-controller",
        "TFJOB_PLUGIN_LIFE": str(LIFE),
        "TFJOB_PLUGIN_LOG": str(log),
    }
    admin["users"] = [
        {
            "name": "sa-exec",
            "user": {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": sys.executable,
                    "args": [str(PLUGIN)],
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    "interactiveMode": "Never",
                }
            },
        }
    ]
    admin["contexts"][0]["context"]["user"] = "sa-exec"
    path.write_text(yaml.safe_dump(admin))


def runs(log: Path) -> list[tuple[float, str]]:
    """(time, the Secret its token is bound to) of each plugin run, in order."""
    lines = log.read_text().splitlines() if log.exists() else []
    return [(float(t), secret) for t, secret in (line.split() for line in lines)]


def refreshes(controller: ControllerProcess) -> list[str]:
    """The reason of each credential refresh the controller logged ("expiring" or
    "unauthorized"), in order. The kubeconfig's first fetch is not one."""
    out = []
    for line in controller.log_text().splitlines():
        if '"exec credential refreshed"' in line:
            out.append(json.loads(line).get("reason", ""))
    return out


class Retirer:
    """Deletes the Secret each earlier token is bound to once the controller has logged
    installing a newer one: from then on a request with that token is refused at once,
    so a controller still using it is caught (it would refresh "unauthorized")."""

    def __init__(self, kube: Kube, log: Path, controller: ControllerProcess) -> None:
        self.kube, self.log, self.controller = kube, log, controller
        self.retired: set[str] = set()

    def __call__(self) -> int:
        done = runs(self.log)
        installed = 1 + len(refreshes(self.controller))  # the first fetch, then each refresh
        for _, secret in done[: max(0, min(installed, len(done)) - 1)]:
            if secret not in self.retired:
                self.kube.req("DELETE", f"/api/v1/namespaces/{SA_NS}/secrets/{secret}")
                self.retired.add(secret)
        return len(done)


def run_to_success(kube: Kube, ns: str, name: str) -> None:
    job = sample()
    job["metadata"]["name"] = name
    kube.create_tfjob(ns, job)
    wait_running(kube, ns, name, 4, timeout=60)
    kube.exit_pod(ns, f"{name}-chief-0", 0)
    wait_job(kube, ns, name, "Succeeded")


def test_exec_plugin_tokens_are_renewed_as_they_expire(
    cluster: Cluster, controller: ControllerProcess, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    apply_controller_rbac(cluster)
    log = tmp_path / "plugin-runs"
    kubeconfig = tmp_path / "exec.kubeconfig"
    exec_kubeconfig(cluster, kubeconfig, log)
    wait_namespaces_gone(kube)
    controller.stop()  # one controller on the cluster at a time
    limited = ControllerProcess(
        cluster,
        "--leader-elect",  # its lease renewals are requests every 2 s, job or no job
        f"--leader-election-namespace={SA_NS}",
        "--leader-election-id=tfjob-controller-exec-test",
        log_name="tfjob-controller-exec",
        kubeconfig=str(kubeconfig),
    )
    try:
        limited.start()
        retire = Retirer(kube, log, limited)
        run_to_success(kube, namespace, "before")
        # Three expiries later: each token was replaced as it ran out, not per request,
        # and each old one is dead once replaced: only the newest can work.
        wait_for(lambda: retire() >= 4, 4 * LIFE + 30, "three renewals")
        wait_for(lambda: retire() and len(retire.retired) >= 3, 30, "three tokens retired")
        run_to_success(kube, namespace, "after")
        times = [t for t, _ in runs(log)]
        # each run replaced a token about to expire: none ran per request
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(gap > LIFE / 2 for gap in gaps), gaps
        # every refresh was an expiry's: no request ever went out with a retired token
        reasons = refreshes(limited)
        assert len(reasons) >= 3 and set(reasons) == {"expiring"}, reasons
        assert "unauthorized" not in limited.log_text()
    finally:
        code = limited.stop()
        controller.start()  # whatever happened: the tests after this one need it
    assert code == 0
