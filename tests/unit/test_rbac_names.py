"""The ClusterRole names the ConfigMap the controller keeps: the two cannot drift."""

from __future__ import annotations

import yaml

from reconcile.objects.reporting import CA_CONFIGMAP
from tests.conftest import REPO


def test_configmap_reads_and_patches_are_the_ca_configmaps_alone() -> None:
    role = next(
        doc
        for doc in yaml.safe_load_all((REPO / "config/rbac/role.yaml").read_text())
        if doc["kind"] == "ClusterRole"
    )
    rules = [r for r in role["rules"] if "configmaps" in r["resources"]]
    assert {tuple(sorted(r["verbs"])) for r in rules} == {("create",), ("get", "patch")}
    for r in rules:
        assert r.get("resourceNames") == (None if r["verbs"] == ["create"] else [CA_CONFIGMAP])
