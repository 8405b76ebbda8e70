"""`tfjob-controller explain` / `tfjob-explain`: what the controller would create, with no
cluster (reconcile.explain runs the planner; tfjob_controller.explain prints)."""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from reconcile.api.spec import read_job
from reconcile.explain import PLACEHOLDER_UID, defaults_applied, explain
from reconcile.plan import PlanConfig, Snapshot, compute_plan
from reconcile.policy.gang import (
    POD_GROUP_LABEL,
    VOLCANO_GROUP_ANNOTATION,
    VOLCANO_TASK_ANNOTATION,
    gang_from_flag,
)
from tests import conformance, strategies
from tests.unit.reconcile.api.test_models import SAMPLES
from tfjob_controller import app
from tfjob_controller.explain import _write_table, _write_yaml, main

NOW = datetime(2024, 1, 1, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]


def tfjobs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "TFJob"]


#: the samples and upstream's examples (test_the_examples_are_there says when those lack)
EXAMPLES = [pytest.param(p, id=p.name) for p in [*SAMPLES, *conformance.examples()]]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def replicas(job: dict[str, Any]) -> int:
    return sum(s.get("replicas", 1) for s in job["spec"]["tfReplicaSpecs"].values())


def job(name: str = "g", workers: int = 3, **run_policy: Any) -> dict[str, Any]:
    def tpl(cpu: str, priority: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "containers": [
                {"name": "tensorflow", "image": "img", "resources": {"requests": {"cpu": cpu}}}
            ]
        }
        if priority:
            spec["priorityClassName"] = priority
        return {"spec": spec}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {
            "runPolicy": run_policy,
            "tfReplicaSpecs": {
                "PS": {"replicas": 1, "template": tpl("2", "low")},
                "Worker": {"replicas": workers, "template": tpl("1", "high")},
            },
        },
    }


# --- every sample and upstream example ---------------------------------------------------


def test_the_examples_are_there() -> None:
    conformance.require(conformance.EXAMPLES_DIR)
    assert SAMPLES and conformance.examples()


@pytest.mark.parametrize("path", EXAMPLES)
def test_every_example_explains_to_its_pods_and_services(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "-f", str(path))
    assert code == 0, err
    docs = [d for d in yaml.safe_load_all(out) if d is not None]
    want = sum(replicas(j) for j in tfjobs(path))
    pods = [d for d in docs if d["kind"] == "Pod"]
    services = [d for d in docs if d["kind"] == "Service"]
    assert len(pods) == want
    assert sorted(s["metadata"]["name"] for s in services) == sorted(
        p["metadata"]["name"] for p in pods
    )
    for pod in pods:
        assert pod["metadata"]["finalizers"] == ["training.kubeflow.org/tfjob-tracking"]
        (ref,) = pod["metadata"]["ownerReferences"]
        assert ref["kind"] == "TFJob" and ref["controller"] is True


@pytest.mark.parametrize("path", EXAMPLES)
def test_explain_gives_exactly_the_controllers_first_pass(path: Path) -> None:
    for raw in tfjobs(path):
        raw["metadata"].update(namespace="ns", uid="u-1")
        e = explain(raw, PlanConfig(), NOW)
        plan = compute_plan(Snapshot(read_job(copy.deepcopy(raw)), [], [], NOW), PlanConfig())
        assert e.valid and e.passes == 1 and e.notes == ()
        # as sent: JSON, the same bodies
        assert json.dumps(e.pods) == json.dumps(plan.create_pods)
        assert json.dumps(e.services) == json.dumps(plan.create_services)
        assert e.podgroup is None


# --- what is printed ----------------------------------------------------------------------


def test_yaml_output_says_what_was_assumed_and_the_defaults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "-f", str(REPO / "config/samples/tfjob-workers.yaml"))
    assert code == 0
    comments = [line for line in out.splitlines() if line.startswith("#")]
    assert comments[0] == "# TFJob default/tfjob-workers: 2 services, 2 pods"
    assert "metadata.namespace is not set" in out and PLACEHOLDER_UID in out
    assert '# default: spec.tfReplicaSpecs[Worker].restartPolicy: "Never"' in comments
    assert "# effective spec, after defaulting:" in comments
    # the effective spec, uncommented, is the defaulted spec
    start = comments.index("# effective spec, after defaulting:") + 1
    effective = yaml.safe_load("\n".join(c[4:] for c in comments[start:]))
    assert effective["runPolicy"] == {"cleanPodPolicy": "None", "suspend": False}
    assert effective["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"] == [
        {"name": "tfjob-port", "containerPort": 2222}
    ]
    pod = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "Pod")
    assert pod["metadata"]["namespace"] == "default"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == PLACEHOLDER_UID
    assert pod["spec"]["restartPolicy"] == "Never"
    env = pod["spec"]["containers"][0]["env"]
    tf_config = json.loads(next(e["value"] for e in env if e["name"] == "TF_CONFIG"))
    assert tf_config["task"] == {"type": "worker", "index": 0}
    assert tf_config["cluster"]["worker"] == [
        "tfjob-workers-worker-0.default.svc:2222",
        "tfjob-workers-worker-1.default.svc:2222",
    ]


def test_namespace_and_cluster_domain_reach_tf_config(capsys: pytest.CaptureFixture[str]) -> None:
    path = REPO / "config/samples/tfjob-workers.yaml"
    code, out, _ = run(capsys, "-f", str(path), "-n", "team-a", "--cluster-domain", "cluster.local")
    assert code == 0
    pod = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "Pod")
    value = pod["spec"]["containers"][0]["env"][-1]["value"]
    assert json.loads(value)["cluster"]["worker"][1] == (
        "tfjob-workers-worker-1.team-a.svc.cluster.local:2222"
    )
    assert "metadata.namespace is not set" not in out


def test_the_progress_endpoint_is_shown_in_the_pods(capsys: pytest.CaptureFixture[str]) -> None:
    path = REPO / "config/samples/tfjob-workers.yaml"
    url = "https://tfjob-controller.kubeflow.svc:10443"
    code, out, _ = run(capsys, "-f", str(path), "-n", "team-a", "--progress-url", url)
    assert code == 0
    pod = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "Pod")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["TFJOB_PROGRESS_URL"] == f"{url}/v1/namespaces/team-a/tfjobs/tfjob-workers/progress"
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "tfjob-progress"]
    token = volume["projected"]["sources"][0]["serviceAccountToken"]
    assert token["audience"] == "tfjob.kubeflow.org/team-a/tfjob-workers"
    # without the flag, as a controller with the endpoint off: nothing
    code, out, _ = run(capsys, "-f", str(path))
    assert "TFJOB_PROGRESS_URL" not in out


def test_an_invalid_job_prints_its_field_errors_and_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = job("Bad_Name")
    bad["spec"]["tfReplicaSpecs"]["Chief"] = {
        "replicas": 2,
        "template": {"spec": {"containers": [{"name": "tensorflow", "image": "i"}]}},
    }
    bad["spec"]["tfReplicaSpecs"]["PS"]["restartPolicy"] = "Sometimes"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad, sort_keys=False))
    for output in ("yaml", "table"):
        code, out, err = run(capsys, "-f", str(path), "-o", output)
        assert code == 1
        assert "invalid TFJob: Bad_Name" in err
        assert "reason TFJobFailedValidation" in out
        for field in (
            "error: metadata.name: 'Bad_Name' must be a DNS-1035 label",
            "error: spec.tfReplicaSpecs[Chief].replicas: Chief replicas must be 0 or 1",
            "error: spec.tfReplicaSpecs[PS].restartPolicy: Unsupported value 'Sometimes'",
        ):
            assert field in out
        assert "kind: Pod" not in out and "kind: Service" not in out
    # the message is the Failed condition's, word for word
    e = explain(bad, PlanConfig(), NOW)
    assert not e.valid and e.failed_reason == "TFJobFailedValidation"
    assert e.failed_message == read_job(bad).invalid_message
    assert f"Failed condition message: {e.failed_message}" in out


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    path = REPO / "config/samples/tfjob-chief-ps-workers.yaml"
    code, out, _ = run(capsys, "-f", str(path), "-o", "table", "--gang-scheduler-name", "sched")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "TFJob default/tfjob-chief-ps-workers: a PodGroup, 4 services, 4 pods"
    head = lines.index(next(line for line in lines if line.startswith("KIND")))
    assert lines[head].split() == [
        "KIND",
        "NAME",
        "REPLICA-TYPE",
        "INDEX",
        "SCHEDULER",
        "TF_CONFIG-TASK",
    ]
    rows = [line.split() for line in lines[head + 1 :]]
    assert rows[0] == ["PodGroup", "tfjob-chief-ps-workers", "-", "-", "-", "-"]
    assert rows[1] == ["Service", "tfjob-chief-ps-workers-chief-0", "Chief", "0", "-", "-"]
    assert ["Pod", "tfjob-chief-ps-workers-worker-1", "Worker", "1", "sched", "worker:1"] in rows
    assert [r[0] for r in rows].count("Pod") == [r[0] for r in rows].count("Service") == 4
    assert "PodGroup scheduling.x-k8s.io/v1alpha1: minMember 4," in out


def test_stdin_and_several_documents(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "\n---\n".join(
        [
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}",
            yaml.safe_dump(job("one", workers=1)),
            yaml.safe_dump(job("two", workers=2)),
        ]
    )
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    code, out, err = run(capsys, "-f", "-", "-o", "table")
    assert code == 0
    assert "document 1 skipped: ConfigMap is not a TFJob" in err
    assert "TFJob default/one: 2 services, 2 pods" in out
    assert "TFJob default/two: 3 services, 3 pods" in out


def test_unreadable_input_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert run(capsys, "-f", str(tmp_path / "missing.yaml"))[0] == 2
    (tmp_path / "cm.yaml").write_text("kind: ConfigMap\n")
    code, _, err = run(capsys, "-f", str(tmp_path / "cm.yaml"))
    assert code == 2 and "no TFJob" in err
    with pytest.raises(SystemExit) as exc:
        main(["-f", "x", "--priority-class", "high"])
    assert exc.value.code == 2


GANGS = ("", "volcano", "scheduler-plugins-scheduler")

# --- gang scheduling ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "api_version", "scheduler"),
    [
        ("volcano", "scheduling.volcano.sh/v1beta1", "volcano"),
        ("Volcano", "scheduling.volcano.sh/v1beta1", "volcano"),
        (
            "scheduler-plugins-scheduler",
            "scheduling.x-k8s.io/v1alpha1",
            "scheduler-plugins-scheduler",
        ),
    ],
)
def test_gang_modes_make_the_podgroup_first_then_the_pods(
    flag: str, api_version: str, scheduler: str
) -> None:
    e = explain(job(), PlanConfig(gang=gang_from_flag(flag)), NOW)
    assert e.valid and e.passes == 2  # the PodGroup (and services), then the pods
    pg = e.podgroup
    assert pg is not None and pg["apiVersion"] == api_version and pg["kind"] == "PodGroup"
    assert pg["spec"]["minMember"] == 4
    assert pg["spec"]["minResources"] == {"cpu": "5"}
    assert pg["metadata"]["ownerReferences"][0]["uid"] == PLACEHOLDER_UID
    assert len(e.pods) == len(e.services) == 4
    assert e.objects[0] is pg
    for pod in e.pods:
        assert pod["spec"]["schedulerName"] == scheduler
        meta = pod["metadata"]
        if scheduler == "volcano":
            assert meta["annotations"][VOLCANO_GROUP_ANNOTATION] == "g"
            assert meta["annotations"][VOLCANO_TASK_ANNOTATION] in ("ps", "worker")
            assert pg["spec"]["queue"] == "default"
        else:
            assert meta["labels"][POD_GROUP_LABEL] == "g"


def test_no_gang_no_podgroup_and_no_scheduler_name() -> None:
    assert gang_from_flag("") is None
    e = explain(job(), PlanConfig(gang=gang_from_flag("")), NOW)
    assert e.podgroup is None and len(e.pods) == 4
    assert all("schedulerName" not in p["spec"] for p in e.pods)


def test_min_available_and_priority_classes_order_min_resources(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    raw = job(schedulingPolicy={"minAvailable": 2})
    gang = PlanConfig(gang=gang_from_flag("volcano"))
    # without priorities, status order: PS (2 CPU) then one worker (1 CPU)
    plain = explain(raw, gang, NOW).podgroup
    assert plain is not None and plain["spec"]["minMember"] == 2
    assert plain["spec"]["minResources"] == {"cpu": "3"}
    # workers first when their class is worth more: two workers
    ranked = explain(raw, gang, NOW, priorities={"high": 100, "low": 1}).podgroup
    assert ranked is not None and ranked["spec"]["minResources"] == {"cpu": "2"}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(raw))
    args = ["-f", str(path), "--gang-scheduler-name", "volcano", "-o", "table"]
    code, out, _ = run(capsys, *args, "--priority-class", "high=100", "--priority-class", "low=1")
    assert code == 0 and "minMember 2, minResources cpu=2" in out


# --- the defaults and the entry points ----------------------------------------------------


def test_defaults_applied_names_each_field() -> None:
    given = {"tfReplicaSpecs": {"worker": {"template": {"spec": {"containers": [{"n": 1}]}}}}}
    effective = {
        "runPolicy": {"suspend": False},
        "tfReplicaSpecs": {
            "Worker": {
                "replicas": 1,
                "template": {"spec": {"containers": [{"n": 1, "ports": [{"p": 2}]}]}},
                "restartPolicy": "Never",
            }
        },
    }
    assert defaults_applied(given, effective) == [
        'spec.runPolicy: {"suspend":false}',
        "spec.tfReplicaSpecs[worker]: read as Worker",
        "spec.tfReplicaSpecs[Worker].replicas: 1",
        'spec.tfReplicaSpecs[Worker].template.spec.containers[0].ports: [{"p":2}]',
        'spec.tfReplicaSpecs[Worker].restartPolicy: "Never"',
    ]
    assert defaults_applied({"restartPolicy": ""}, {"restartPolicy": "Never"}) == [
        'spec.restartPolicy: "Never" (was "")'
    ]


def test_the_controller_runs_it_as_a_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    path = REPO / "config/samples/tfjob-workers.yaml"
    with pytest.raises(SystemExit) as exc:
        app.main(["explain", "-f", str(path), "-o", "table"])
    assert exc.value.code == 0
    assert "TFJob default/tfjob-workers: 2 services, 2 pods" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        app.main(["explain", "--help"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("usage: tfjob-controller explain")


def test_importing_it_loads_no_kubernetes_client() -> None:
    code = (
        "import sys, tfjob_controller.explain\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in"
        " ('kubernetes_asyncio', 'aiohttp', 'anyio', 'structlog', 'tfjob_controller.app')"
        " or m == 'tfjob_controller.app']\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_console_script_is_declared() -> None:
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["tfjob-explain"] == "tfjob_controller.explain:main"


@seed(20261203)
@settings(
    max_examples=int(os.environ.get("TFJOB_FUZZ_EXAMPLES", "100")) // 4,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.one_of(strategies.tfjobs(), strategies.tfjobs(plausible=True)), st.sampled_from(GANGS))
def test_any_spec_explains_and_prints(job: dict[str, Any], flag: str) -> None:
    e = explain(job, PlanConfig(gang=gang_from_flag(flag)), NOW)
    view = read_job(job)
    assert e.valid is (view.tfjob is not None)
    if view.tfjob is not None and not view.run_policy.suspend and e.failed_reason is None:
        want = sum(s.count for s in view.tfjob.replica_specs.values())
        assert len(e.pods) == len(e.services) == want
    table = io.StringIO()
    _write_table([e], table)
    assert table.getvalue().startswith("TFJob ")
    assert all(line.isprintable() for line in table.getvalue().splitlines())
    out = io.StringIO()
    _write_yaml([e], out)
    assert [d for d in yaml.safe_load_all(out.getvalue()) if d] == e.objects


def test_a_valid_job_that_fails_at_once_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job(backoffLimit=-1)))
    code, out, err = run(capsys, "-f", str(path), "-o", "table")
    assert code == 1 and "TFJob failed at once: g" in err
    assert "TFJob default/g: fails at once; the controller sets Failed, reason" in out
    assert "error:" not in out


def test_yaml_is_read_as_kubectl_reads_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    raw = job(workers=1)
    raw["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"] = {
        "annotations": {"day": "DAY"}
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(raw).replace("DAY", "2024-01-01"))  # an unquoted date
    code, out, _ = run(capsys, "-f", str(path))
    assert code == 0
    pods = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Pod"]
    worker = next(p for p in pods if p["metadata"]["name"] == "g-worker-0")
    assert worker["metadata"]["annotations"] == {"day": "2024-01-01"}
    path.write_text("kind: TFJob\nmetadata: {name: d}\nspec: !!binary aGVsbG8=\n")
    code, _, err = run(capsys, "-f", str(path))
    assert code == 2 and "document 1 is not JSON" in err
