"""The generated CRD: committed file up to date, structural, consistent with the models.

CEL rules can only run in an apiserver; tests/cluster/test_crd_admission.py covers them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack import gen_crd
from reconcile.api.defaults import apply_defaults
from reconcile.api.models import dump_tfjob, parse_tfjob
from reconcile.api.status_types import JobStatus
from tests import conformance
from tests.unit.reconcile.api.test_models import REPO, SAMPLES

CRD_FILE = REPO / "config" / "crd" / "kubeflow.org_tfjobs.yaml"


def schema() -> dict[str, Any]:
    out: dict[str, Any] = gen_crd.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return out


def test_committed_crd_is_generated() -> None:
    assert CRD_FILE.read_text() == gen_crd.render(), "stale CRD: run python -m hack.gen_crd"


def test_check_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    assert gen_crd.main(["--check"]) == 0
    stale = tmp_path / "config" / "crd" / CRD_FILE.name
    stale.parent.mkdir(parents=True)
    stale.write_text(gen_crd.render().replace("listKind", "listKinz"))
    chart = tmp_path / "charts" / "tfjob-controller" / "templates" / "crd.yaml"
    monkeypatch.setattr(gen_crd, "REPO", tmp_path)
    monkeypatch.setattr(gen_crd, "OUTPUT", stale)
    monkeypatch.setattr(gen_crd, "CHART_OUTPUT", chart)
    assert gen_crd.main(["--check"]) == 1
    out = capsys.readouterr().out
    assert "+    listKind" in out and "charts/tfjob-controller/templates/crd.yaml" in out
    assert gen_crd.main([]) == 0
    assert gen_crd.main(["--check"]) == 0
    # the chart's copy is the same object, behind the chart's switches
    body = chart.read_text()
    assert body.startswith(gen_crd.HEADER + "{{- if .Values.crds.install }}\n")
    assert "helm.sh/resource-policy: keep" in body and body.endswith("{{- end }}\n")


def test_crd_basics() -> None:
    crd = yaml.safe_load(CRD_FILE.read_text())
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "tfjobs.kubeflow.org"
    assert spec["names"]["kind"] == "TFJob" and spec["names"]["plural"] == "tfjobs"
    # as upstream's: a short name equal to the singular conflicts when one replaces the other
    assert "shortNames" not in spec["names"] and spec["names"]["singular"] == "tfjob"
    assert "kubeflow" in spec["names"]["categories"]
    (version,) = spec["versions"]
    assert version["subresources"] == {"status": {}}
    columns = version["additionalPrinterColumns"]
    # upstream's two first, then training progress; the rest only with -o wide
    assert [(c["name"], c["jsonPath"]) for c in columns[:4]] == [
        ("State", ".status.conditions[-1:].type"),
        ("Age", ".metadata.creationTimestamp"),
        ("Progress", ".status.trainingProgress.percent"),
        ("ETA", ".status.trainingProgress.estimatedRemaining"),
    ]
    assert all(c.get("priority", 0) == 0 for c in columns[:4])
    assert all(c.get("priority", 0) == 1 for c in columns[4:])


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for key, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{key}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}[*]")
    if "items" in node:
        yield from walk(node["items"], f"{path}[]")


def test_schema_is_structural() -> None:
    for path, node in walk(schema()):
        assert "$ref" not in node and "title" not in node, path
        if node.get("x-kubernetes-int-or-string"):
            continue
        assert node.get("type") in {"object", "array", "string", "integer", "boolean", "number"}, (
            path
        )
        assert "anyOf" not in node, path
        if "properties" in node:
            assert set(node.get("required", [])) <= set(node["properties"]), path


def test_pod_template_is_preserved_not_pruned() -> None:
    nodes = dict(walk(schema()))
    template = nodes[".spec.tfReplicaSpecs[*].template"]
    assert template["x-kubernetes-preserve-unknown-fields"] is True
    assert nodes[".spec.tfReplicaSpecs[*].template.spec"]["x-kubernetes-preserve-unknown-fields"]
    assert nodes[".spec.tfReplicaSpecs[*].template.spec.containers[]"][
        "x-kubernetes-preserve-unknown-fields"
    ]


def test_status_schema_follows_the_status_model() -> None:
    status = schema()["properties"]["status"]["properties"]
    assert set(status) == {f.alias or n for n, f in JobStatus.model_fields.items()}


def test_every_rule_has_a_message_naming_a_field() -> None:
    rules = [
        (path, rule)
        for path, node in walk(schema())
        for rule in node.get("x-kubernetes-validations", [])
    ]
    assert len(rules) >= 8
    for path, rule in rules:
        # The apiserver prefixes the rule's own path; root and runPolicy rules must
        # name the field they are about themselves.
        if path in {"", ".spec.runPolicy"}:
            assert rule["message"].startswith(("spec.", "metadata.")), (path, rule)


# --- a tiny structural validator + defaulter, enough to check data against the schema ----


def schema_errors(value: Any, node: dict[str, Any], path: str = "") -> list[str]:
    if node.get("x-kubernetes-int-or-string"):
        return [] if isinstance(value, int | str) else [f"{path}: not int-or-string"]
    kind = node["type"]
    types = {"object": dict, "array": list, "string": str, "boolean": bool, "number": float | int}
    if kind == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            return [f"{path}: not an integer"]
    elif not isinstance(value, types[kind]):
        return [f"{path}: not {kind}"]
    errors = []
    if "enum" in node and value not in node["enum"]:
        errors.append(f"{path}: not in enum")
    if "minimum" in node and value < node["minimum"]:
        errors.append(f"{path}: below minimum")
    for key in ("minLength", "minItems"):
        if key in node and len(value) < node[key]:
            errors.append(f"{path}: violates {key}")
    for key in ("maxLength", "maxItems", "maxProperties"):
        if key in node and len(value) > node[key]:
            errors.append(f"{path}: violates {key}")
    if kind == "object":
        errors += [f"{path}.{r}: required" for r in node.get("required", []) if r not in value]
        for key, child in value.items():
            if key in node.get("properties", {}):
                errors += schema_errors(child, node["properties"][key], f"{path}.{key}")
            elif isinstance(node.get("additionalProperties"), dict):
                errors += schema_errors(child, node["additionalProperties"], f"{path}[{key}]")
    if kind == "array":
        for i, item in enumerate(value):
            errors += schema_errors(item, node["items"], f"{path}[{i}]")
    return errors


def schema_default(value: Any, node: dict[str, Any]) -> Any:
    """Structural defaulting as the apiserver does it: fill absent properties that
    have a default, then descend (also into defaulted values)."""
    if isinstance(value, dict) and node.get("type") == "object":
        out = dict(value)
        for key, child in node.get("properties", {}).items():
            if key not in out and "default" in child:
                out[key] = copy.deepcopy(child["default"])
            if key in out:
                out[key] = schema_default(out[key], child)
        if isinstance(node.get("additionalProperties"), dict):
            for key in set(out) - set(node.get("properties", {})):
                out[key] = schema_default(out[key], node["additionalProperties"])
        return out
    if isinstance(value, list) and "items" in node:
        return [schema_default(v, node["items"]) for v in value]
    return value


DATA = [*conformance.examples(), *SAMPLES]


@pytest.mark.parametrize("path", DATA, ids=lambda p: p.name)
def test_examples_and_samples_fit_the_schema(path: Path) -> None:
    obj = yaml.safe_load(path.read_text())
    assert schema_errors(obj, schema()) == []
    assert schema_errors(schema_default(obj, schema()), schema()) == []


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, dict) and value:
        for key, child in value.items():
            yield from _leaves(child, (*path, key))
    else:
        yield path, value


@pytest.mark.parametrize("path", DATA, ids=lambda p: p.name)
def test_schema_defaults_agree_with_apply_defaults(path: Path) -> None:
    # Whatever the apiserver persists as a default must be what the controller
    # would have assumed anyway, or a stored object would change meaning.
    obj = yaml.safe_load(path.read_text())
    by_schema = schema_default(obj, schema())
    by_controller = dump_tfjob(apply_defaults(parse_tfjob(obj)))
    given = dict(_leaves(obj))
    added = {p: v for p, v in _leaves(by_schema) if p not in given}
    assert added, "the schema defaults nothing?"
    for leaf_path, leaf in added.items():
        node: Any = by_controller
        for key in leaf_path:
            node = node[key]
        assert node == leaf, leaf_path
    assert dump_tfjob(apply_defaults(parse_tfjob(by_schema))) == by_controller


def test_schema_defaults_cover_the_sdk_needs() -> None:
    # The kubeflow-training SDK cannot deserialize a TFJob without spec.runPolicy.
    obj = {"metadata": {"name": "x"}, "spec": {"tfReplicaSpecs": {"Worker": {"template": {}}}}}
    spec = schema_default(obj, schema())["spec"]
    assert spec["runPolicy"] == {"cleanPodPolicy": "None", "suspend": False}
    assert spec["tfReplicaSpecs"]["Worker"]["replicas"] == 1
    assert spec["tfReplicaSpecs"]["Worker"]["restartPolicy"] == "Never"
