"""/metrics as deployed: HTTPS, a scraper's token reviewed by the apiserver and its
right to get /metrics asked of it, under the controller's own least-privilege RBAC.

The controller runs as its ServiceAccount (config/rbac) with the default
--metrics-secure, watching a namespace of its own (no job of the session's is touched);
curl asks for /metrics with no token, with a token whose user has no role, and with one
bound to config/rbac's metrics-reader ClusterRole."""

from __future__ import annotations

import subprocess
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.kube import ControllerProcess, Kube
from tests.cluster.test_rbac import (
    apply_controller_rbac,
    apply_manifests,
    service_account_kubeconfig,
    token_for,
)
from tests.conftest import REPO, Cluster

READER = "tfjob-controller-metrics-reader"


def curl(url: str, token: str = "") -> tuple[int, str]:
    """(status, body) of a GET with curl; -k: the certificate is the controller's own,
    made for the first scrape."""
    cmd = ["curl", "-sS", "-k", "--max-time", "10", "-w", "\n%{http_code}", url]
    if token:
        cmd += ["-H", f"Authorization: Bearer {token}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    body, _, code = out.rpartition("\n")
    return int(code), body


def test_metrics_need_a_token_and_the_reader_role(
    cluster: Cluster, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    apply_controller_rbac(cluster)
    apply_manifests(cluster, REPO / "config/rbac/metrics_reader_role.yaml")
    kubeconfig = tmp_path / "sa.kubeconfig"
    service_account_kubeconfig(cluster, kube, kubeconfig)
    for account in ("scraper", "nobody"):
        cluster.kubectl("-n", namespace, "create", "serviceaccount", account)
    binding = f"scraper-{namespace}"
    cluster.kubectl(
        "create",
        "clusterrolebinding",
        binding,
        f"--clusterrole={READER}",
        f"--serviceaccount={namespace}:scraper",
    )
    ctl = ControllerProcess(
        cluster,
        f"--namespace={namespace}",
        log_name="tfjob-controller-secure-metrics",
        kubeconfig=str(kubeconfig),
        secure_metrics=True,
    )
    try:
        ctl.start()
        base = f"https://127.0.0.1:{ctl.metrics_port}"
        status, body = curl(f"{base}/metrics")
        assert (status, body) == (401, "a bearer token is required\n"), body
        assert curl(f"{base}/metrics", "not-a-token")[0] == 401
        status, body = curl(f"{base}/metrics", token_for(kube, "nobody", namespace))
        assert status == 403, body
        assert f'"system:serviceaccount:{namespace}:nobody" may not get path "/metrics"' in body
        scraper = token_for(kube, "scraper", namespace)
        status, body = curl(f"{base}/metrics", scraper)
        assert status == 200, body
        families = {f.name: f for f in text_string_to_metric_families(body)}
        # names as the text format declares them (a counter's family drops _total)
        assert {"controller_runtime_reconcile", "workqueue_depth", "process_cpu_seconds"} <= set(
            families
        ), sorted(families)
        # the role grants /metrics only: the queue's debug view is another path
        assert curl(f"{base}/debug/queue?key=a/b", scraper)[0] == 403
        # plain HTTP is not spoken on the metrics port; the probes stay plain
        plain = subprocess.run(
            ["curl", "-sS", "--max-time", "5", f"http://127.0.0.1:{ctl.metrics_port}/metrics"],
            capture_output=True,
            text=True,
        )
        assert plain.returncode != 0 or not plain.stdout.startswith("# HELP")
        assert curl(f"http://127.0.0.1:{ctl.health_port}/healthz")[0] == 200
        # what the reviews cost the apiserver: no error came back from one
        assert "request review failed" not in ctl.log_text()
    finally:
        ctl.stop()
        cluster.kubectl("delete", "clusterrolebinding", binding, "--ignore-not-found")
