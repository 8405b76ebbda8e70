"""config/default, what operators apply: it renders with kustomize and the apiserver
accepts every object in it (server-side dry run: admission and schema in full, nothing
stored)."""

from __future__ import annotations

import yaml

from tests.conftest import REPO, Cluster

DEFAULT = REPO / "config" / "default"


def test_config_default_renders_and_passes_a_server_side_dry_run(cluster: Cluster) -> None:
    rendered = list(yaml.safe_load_all(cluster.kubectl("kustomize", str(DEFAULT))))
    kinds = sorted(d["kind"] for d in rendered if d)
    assert kinds == sorted(
        [
            "Namespace",
            "CustomResourceDefinition",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRole",  # the scrapers' (metrics reader)
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Deployment",
            "Service",
            "Service",
            "NetworkPolicy",
        ]
    ), kinds
    # A dry run creates nothing, so the namespace the rest goes into must exist.
    cluster.kubectl("apply", "-f", str(REPO / "config" / "manager" / "namespace.yaml"))
    out = cluster.kubectl("apply", "--dry-run=server", "-k", str(DEFAULT), "-o", "name")
    applied = sorted(line.split("/", 1)[0] for line in out.split())
    assert len(applied) == len(rendered), out
    assert {"deployment.apps", "customresourcedefinition.apiextensions.k8s.io"} <= set(applied)
