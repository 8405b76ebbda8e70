"""The alerts (config/prometheus/rules.yaml) pass promtool's checks and unit tests, and
every metric they and the dashboard (config/grafana/tfjob-controller.json) read is one a
running controller exports, under that name, with those labels and label values."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.kube import ControllerProcess, Kube, sample, wait_for, wait_namespaces_gone
from tests.cluster.progress_endpoint import progress_endpoint
from tests.cluster.promql import Selector, selectors
from tests.conftest import REPO, Cluster

RULES = REPO / "config" / "prometheus" / "rules.yaml"
DASHBOARD = REPO / "config" / "grafana" / "tfjob-controller.json"
#: labels Prometheus adds to every series of a target (the ServiceMonitor's relabelling)
TARGET_LABELS = {"job", "instance", "namespace", "pod", "service", "endpoint", "container"}
#: what Prometheus itself makes per target
SYNTHETIC = {"up"}


def promtool(tools: Path, *args: str) -> str:
    proc = subprocess.run(
        [str(tools / "promtool"), *args],
        cwd=RULES.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"promtool {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_promtool_checks_the_rules_and_their_unit_tests_pass(ops_tools: Path) -> None:
    assert "SUCCESS: 12 rules found" in promtool(ops_tools, "check", "rules", RULES.name)
    assert "SUCCESS" in promtool(ops_tools, "test", "rules", "rules_test.yaml")


def rule_expressions() -> list[tuple[str, str]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [(r["alert"], r["expr"]) for g in groups for r in g["rules"]]


def dashboard_expressions() -> list[tuple[str, str]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(p["title"], t["expr"]) for p in panels for t in p.get("targets", [])]


def test_the_rules_and_the_dashboard_read_what_they_should() -> None:
    """The extraction itself: a check that found nothing would pass whatever the names."""
    read = {s.metric for _, e in rule_expressions() + dashboard_expressions() for s in selectors(e)}
    assert {
        "up",
        "leader_election_master_status",
        "controller_runtime_reconcile_errors_total",
        "workqueue_queue_duration_seconds_bucket",
        "controller_events_total",
        "training_operator_jobs_failed_total",
        "tfjob_stalls_total",
        "event_loop_lag_seconds_bucket",
        "process_resident_memory_bytes",
    } <= read, sorted(read)
    (down,) = [e for a, e in rule_expressions() if a == "TFJobControllerFailedCreates"]
    (sel,) = selectors(down)
    assert (sel.metric, sel.labels) == ("controller_events_total", {"type", "reason"})


def exported(text: str) -> dict[str, list[dict[str, str]]]:
    """Sample name -> the label sets it is exported with."""
    out: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(dict(s.labels))
    return out


def problems(where: str, expr: str, have: dict[str, list[dict[str, str]]]) -> list[str]:
    found: list[str] = []
    for sel in selectors(expr):
        if sel.metric in SYNTHETIC:
            continue
        series = have.get(sel.metric)
        if not series:
            found.append(f"{where}: {sel.metric} is not exported")
            continue
        names = set().union(*(s.keys() for s in series)) | TARGET_LABELS
        missing = sel.labels - names
        if missing:
            found.append(f"{where}: {sel.metric} has no label {sorted(missing)}")
        found += [f"{where}: {p}" for p in unmatched(sel, expr, series)]
    return found


def unmatched(sel: Selector, expr: str, series: list[dict[str, str]]) -> list[str]:
    """Equality and regex matchers on the metric that no exported series satisfies."""
    body = re.search(re.escape(sel.metric) + r"\{([^}]*)\}", expr)
    if body is None:
        return []
    out = []
    for name, op, value in re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"', body.group(1)):
        if name in TARGET_LABELS or op in ("!=", "!~"):
            continue
        if op == "=":
            ok = any(s.get(name) == value for s in series)
        else:
            ok = any(re.fullmatch(value, s.get(name, "")) for s in series)
        if not ok:
            out.append(f'{sel.metric}{{{name}{op}"{value}"}} matches no exported series')
    return out


def test_every_metric_read_is_exported_by_a_running_controller(
    cluster: Cluster, controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    """A controller as deployed (leader election under the default Lease name, the
    progress endpoint on), in the session controller's stead; one job through it, so
    the per-namespace job counters exist."""
    wait_namespaces_gone(kube)
    controller.stop()  # one controller acts on a job at a time
    ctl = ControllerProcess(
        cluster,
        f"--namespace={namespace}",
        "--leader-elect",
        f"--leader-election-namespace={namespace}",
        *progress_endpoint(cluster).flags,
        log_name="tfjob-controller-alerts",
    )
    try:
        ctl.start()
        job = sample()
        kube.create_tfjob(namespace, job)
        name = job["metadata"]["name"]
        wait_for(lambda: kube.pods(namespace, name), 60, "the job's pods")
        have = exported(ctl.metrics())
        found = [p for a, e in rule_expressions() for p in problems(f"alert {a}", e, have)]
        found += [p for t, e in dashboard_expressions() for p in problems(f"panel {t!r}", e, have)]
        assert not found, "\n".join(found)
    finally:
        ctl.stop()
        controller.start()  # whatever happened: the tests after this one need it
