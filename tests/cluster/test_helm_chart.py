"""charts/tfjob-controller: lint-clean, the same objects as config/default for the
default values, and each value doing what values.yaml says. (The chart installed,
upgraded and uninstalled with the controller running in the cluster:
test_in_cluster.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.chart import (
    CHART,
    NAMESPACE,
    Doc,
    by_identity,
    deployment,
    helm,
    hooks,
    kustomized,
    manager_args,
    release_objects,
    render,
    without_helm_metadata,
)
from tests.conftest import REPO, Cluster
from tests.invocations import check_invocation

DEFAULT_ARGS = [
    "--leader-elect",
    "--log-format=json",
    "--metrics-bind-address=:8443",
    "--health-probe-bind-address=:8081",
    f"--progress-url=https://tfjob-controller-progress.{NAMESPACE}.svc:10443",
    "--progress-cert-dir=/var/run/tfjob-controller/progress",
]


def test_the_chart_lints_clean(ops_tools: Path) -> None:
    out = helm(ops_tools, "lint", "--strict", str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in out


def test_default_values_render_what_config_default_applies(
    ops_tools: Path, cluster: Cluster
) -> None:
    """Object for object, field for field: Helm's own labels (chart, instance, version,
    managed-by) and the CRD's keep annotation aside, and the Namespace, which Helm makes
    (--create-namespace) rather than owns."""
    chart = by_identity([without_helm_metadata(d) for d in release_objects(render(ops_tools))])
    kust = by_identity([d for d in kustomized(cluster) if d["kind"] != "Namespace"])
    assert sorted(chart) == sorted(kust)
    for key, want in kust.items():
        assert chart[key] == want, (
            f"{key} differs:\nchart:     {json.dumps(chart[key], sort_keys=True)[:3000]}\n"
            f"kustomize: {json.dumps(want, sort_keys=True)[:3000]}"
        )
    assert manager_args(list(chart.values())) == DEFAULT_ARGS


def test_every_object_carries_the_release_labels_and_the_crd_is_kept(ops_tools: Path) -> None:
    docs = render(ops_tools)
    for d in docs:
        labels = d["metadata"].get("labels") or {}
        assert labels.get("app.kubernetes.io/managed-by") == "Helm", d["metadata"]["name"]
        assert labels.get("app.kubernetes.io/name") == "tfjob-controller"
    (crd,) = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    no_keep = render(ops_tools, "crds.keep=false")
    (crd,) = [d for d in no_keep if d["kind"] == "CustomResourceDefinition"]
    assert "annotations" not in crd["metadata"]
    assert not [d for d in render(ops_tools, "crds.install=false") if "Definition" in d["kind"]]


def test_values_reach_the_controller(ops_tools: Path) -> None:
    docs = render(
        ops_tools,
        "image.repository=example.test/tfjob-controller",
        "image.tag=1.2.3",
        "image.pullPolicy=Always",
        "replicaCount=2",
        "leaderElection.id=my-lease",
        "kubeApi.qps=50",
        "kubeApi.burst=100",
        "controllerThreads=8",
        "gangSchedulerName=volcano",
        "watchNamespace=team-a",
        "logLevel=debug",
        "extraArgs={--collateral-window=30}",
        "nodeSelector.pool=system",
        "tolerations[0].key=dedicated",
        "tolerations[0].operator=Exists",
        "priorityClassName=system-cluster-critical",
        "resources.limits.memory=1Gi",
        namespace="ops",
    )
    dep = deployment(docs)
    pod = dep["spec"]["template"]["spec"]
    (manager,) = pod["containers"]
    assert dep["metadata"]["namespace"] == "ops" and dep["spec"]["replicas"] == 2
    assert manager["image"] == "example.test/tfjob-controller:1.2.3"
    assert manager["imagePullPolicy"] == "Always"
    assert manager["args"] == [
        "--leader-elect",
        "--log-format=json",
        "--metrics-bind-address=:8443",
        "--health-probe-bind-address=:8081",
        "--progress-url=https://tfjob-controller-progress.ops.svc:10443",
        "--progress-cert-dir=/var/run/tfjob-controller/progress",
        "--leader-election-id=my-lease",
        "--kube-api-qps=50",
        "--kube-api-burst=100",
        "--controller-threads=8",
        "--gang-scheduler-name=volcano",
        "--namespace=team-a",
        "--log-level=debug",
        "--collateral-window=30",
    ]
    assert pod["nodeSelector"] == {"pool": "system"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert manager["resources"]["limits"] == {"memory": "1Gi"}
    # the RBAC subjects and the Role follow the release's namespace
    by = by_identity(release_objects(docs))
    binding = by[("ClusterRoleBinding", "", "tfjob-controller")]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "tfjob-controller", "namespace": "ops"}
    ]
    assert ("Role", "ops", "tfjob-controller-leader-election") in by
    # the uninstall hook runs where the controller runs, on the same image, one namespace
    job = next(d for d in hooks(docs) if d["kind"] == "Job")
    hook_pod = job["spec"]["template"]["spec"]
    assert hook_pod["nodeSelector"] == {"pool": "system"}
    assert hook_pod["containers"][0]["image"] == "example.test/tfjob-controller:1.2.3"
    assert hook_pod["containers"][0]["args"] == [
        "release-finalizers",
        "--stop-deployment=ops/tfjob-controller",
        "--namespace=team-a",
    ]


@pytest.mark.parametrize(
    "sets",
    [
        (),
        ("metrics.secure=false", "metrics.port=8080"),
        ("progress.enabled=false",),
        ("progress.port=9443", "metrics.port=9444", "leaderElection.enabled=false"),
        ("metrics.certSecret=metrics-tls", "gangSchedulerName=scheduler-plugins-scheduler"),
        ("kubeApi.qps=50", "kubeApi.burst=100", "controllerThreads=8", "logLevel=debug"),
    ],
    ids=["defaults", "plain-metrics", "no-progress", "other-ports", "cert-gang", "limits"],
)
def test_the_rendered_args_pass_the_controller_start_up_checks(
    ops_tools: Path, sets: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    check_invocation(manager_args(render(ops_tools, *sets)), capsys)


@pytest.mark.parametrize(
    "sets",
    [
        ("metrics.port=8081",),
        ("progress.port=8081",),
        ("progress.port=9443", "metrics.port=9443"),
    ],
)
def test_ports_that_would_be_one_socket_fail_the_render(
    ops_tools: Path, sets: tuple[str, ...]
) -> None:
    with pytest.raises(AssertionError, match="choose another"):
        render(ops_tools, *sets)
    # with progress off, its port is no one's
    if sets == ("progress.port=8081",):
        render(ops_tools, *sets, "progress.enabled=false")


def test_metrics_values(ops_tools: Path) -> None:
    plain = render(ops_tools, "metrics.secure=false", "metrics.port=8080")
    args = manager_args(plain)
    assert "--metrics-bind-address=:8080" in args and "--metrics-secure=false" in args
    svc = by_identity(plain)[("Service", NAMESPACE, "tfjob-controller-metrics")]
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "metrics"}]
    annotations = deployment(plain)["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scheme"] == "http"

    cert = render(
        ops_tools,
        "metrics.certSecret=metrics-tls",
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.labels.release=prom",
    )
    assert "--metrics-cert-dir=/var/run/tfjob-controller/metrics" in manager_args(cert)
    pod = deployment(cert)["spec"]["template"]["spec"]
    assert {"name": "metrics-tls", "secret": {"secretName": "metrics-tls"}} in pod["volumes"]
    (monitor,) = [d for d in cert if d["kind"] == "ServiceMonitor"]
    assert monitor["metadata"]["labels"]["release"] == "prom"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "https" and endpoint["scheme"] == "https"
    assert endpoint["bearerTokenFile"].endswith("/serviceaccount/token")


def test_progress_off_leaves_out_its_flags_and_service(ops_tools: Path) -> None:
    docs = render(ops_tools, "progress.enabled=false")
    assert not [a for a in manager_args(docs) if a.startswith("--progress")]
    assert ("Service", NAMESPACE, "tfjob-controller-progress") not in by_identity(docs)
    moved = manager_args(render(ops_tools, "progress.port=12000"))
    assert "--progress-bind-address=:12000" in moved
    assert f"--progress-url=https://tfjob-controller-progress.{NAMESPACE}.svc:12000" in moved


def network_policy(docs: list[Doc]) -> Doc | None:
    found = [d for d in docs if d["kind"] == "NetworkPolicy"]
    return found[0] if found else None


def rules(policy: Doc) -> dict[str, list[Any]]:
    """Each ingress rule's peers, by the one named port it opens."""
    out: dict[str, list[Any]] = {}
    for rule in policy["spec"]["ingress"]:
        (port,) = rule["ports"]
        assert port["protocol"] == "TCP"
        out[port["port"]] = rule["from"]
    return out


def test_the_network_policy_opens_only_the_progress_and_metrics_ports(
    ops_tools: Path, cluster: Cluster
) -> None:
    """Progress from pods of any namespace, metrics from the scrapers' namespace, nothing
    else (the probes come from the node, which a policy never blocks). The apiserver
    takes each variant; the local network plugin does not enforce policies."""
    default = network_policy(render(ops_tools))
    assert default is not None
    assert default["spec"]["podSelector"] == {
        "matchLabels": {"app.kubernetes.io/name": "tfjob-controller"}
    }
    assert default["spec"]["policyTypes"] == ["Ingress"]
    assert rules(default) == {
        "progress": [{"namespaceSelector": {}}],
        "metrics": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
        ],
    }
    # the container's ports carry the names the policy opens
    pod = deployment(render(ops_tools))["spec"]["template"]["spec"]
    names = {p["name"] for p in pod["containers"][0]["ports"]}
    assert {"progress", "metrics"} <= names

    scrapers = render(
        ops_tools,
        "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=observability",
    )
    policy = network_policy(scrapers)
    assert policy is not None
    assert rules(policy)["metrics"] == [
        {"namespaceSelector": {"matchLabels": {"team": "observability"}}}
    ]
    # an empty list admits nobody: the rule is left out, not rendered as `from: []`
    closed = network_policy(render(ops_tools, "networkPolicy.metricsFrom=null"))
    assert closed is not None and list(rules(closed)) == ["progress"]
    no_progress = network_policy(render(ops_tools, "progress.enabled=false"))
    assert no_progress is not None and list(rules(no_progress)) == ["metrics"]
    assert network_policy(render(ops_tools, "networkPolicy.enabled=false")) is None

    for one in (default, policy, closed, no_progress):
        doc = json.dumps({**one, "metadata": {**one["metadata"], "namespace": "default"}})
        out = cluster.kubectl("apply", "--dry-run=server", "-f", "-", "-o", "name", input=doc)
        assert out.strip() == "networkpolicy.networking.k8s.io/tfjob-controller"


def test_the_uninstall_hook_can_be_left_out(ops_tools: Path) -> None:
    assert hooks(render(ops_tools)) and not hooks(render(ops_tools, "uninstallHook.enabled=false"))


def test_hook_objects_are_deleted_once_the_hook_succeeds(ops_tools: Path) -> None:
    for doc in hooks(render(ops_tools)):
        annotations = doc["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-delete"
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    # the Job's pod is not one the metrics or progress Services select
    job = next(d for d in hooks(render(ops_tools)) if d["kind"] == "Job")
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] != "tfjob-controller"


def test_the_alerts_and_the_dashboard_are_config_s(ops_tools: Path, cluster: Cluster) -> None:
    """The chart's PrometheusRule, ServiceMonitor and dashboard ConfigMap carry what
    config/prometheus and config/grafana apply."""
    docs = render(
        ops_tools,
        "prometheusRule.enabled=true",
        "grafanaDashboard.enabled=true",
        "metrics.serviceMonitor.enabled=true",
    )
    chart = by_identity([without_helm_metadata(d) for d in release_objects(docs)])
    for part in ("prometheus", "grafana"):
        out = cluster.kubectl("kustomize", str(REPO / "config" / part))
        for doc in (d for d in yaml.safe_load_all(out) if d):
            key = (doc["kind"], doc["metadata"]["namespace"], doc["metadata"]["name"])
            mine = chart[key]
            if doc["kind"] == "ConfigMap":
                (name,) = doc["data"]
                assert json.loads(mine["data"][name]) == json.loads(doc["data"][name])
                assert mine["metadata"]["labels"] == doc["metadata"]["labels"]
            else:
                assert mine == doc, key
