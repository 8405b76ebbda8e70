"""hack/bench --scaling: the report's arithmetic, and the audit log read a chunk at a
time with only our agents' lines parsed."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import orjson
import pytest

from hack.benchmark import audit
from hack.benchmark.audit import Requests, _Scan
from hack.benchmark.common import parse_modes
from hack.benchmark.control_plane import _DB_SIZE, Usage
from hack.benchmark.results import PhaseResult
from hack.benchmark.scaling import FLOOR, Table, scaling_json, scaling_report


def result(name: str, creation: float, **extra: object) -> PhaseResult:
    return PhaseResult(
        name=name,
        mode="unlimited",
        namespace="ns",
        requests=Requests(),
        creation_s=creation,
        expected_objects=0,
        created_objects=0,
        wall_s=creation,
        **extra,  # type: ignore[arg-type]
    )


def args() -> argparse.Namespace:
    return argparse.Namespace(scaling=[10, 20], replicas=2, qps=parse_modes("unlimited"))


def table() -> Table:
    return {
        "ours": [
            (10, result("ours", 12.0, cpu_s=2.0, running_lat=[0.1] * 98 + [0.9] * 2, jobs_succeeded=10,
                        cpu_ready_s=0.5, cpu_settled_s=1.7,
                        running_lat_after_submit=[0.1] * 99 + [0.5],
                        settled_rss=100 * 2**20, control_plane={"etcd": Usage(3.0, 50 * 2**20)})),
            (20, result("ours", 30.0, cpu_s=4.0, jobs_succeeded=20, settled_rss=150 * 2**20)),
        ],
        FLOOR: [(10, result("floor", 10.0, etcd_db=64 * 2**20)), (20, result("floor", 20.0))],
    }  # fmt: skip


def test_rows_carry_the_ratio_to_the_floor_at_the_same_size() -> None:
    lines = scaling_report(args(), table()).splitlines()
    ours10 = next(ln for ln in lines if ln.startswith("| ours | 10 |"))
    cells = [c.strip() for c in ours10.split("|")[1:-1]]
    # controller, jobs, pods, creation, ÷ floor, status p99, the same after submission,
    # CPU, CPU per pod (ms), ...
    assert cells[:9] == ["ours", "10", "20", "12.0", "1.20", "0.90", "0.10", "2.0", "100.0"]
    assert cells[-1] == "10/10"
    ours20 = next(ln for ln in lines if ln.startswith("| ours | 20 |"))
    assert [c.strip() for c in ours20.split("|")[1:-1]][4] == "1.50"
    floor10 = next(ln for ln in lines if ln.startswith("| floor | 10 |"))  # the first table
    assert [c.strip() for c in floor10.split("|")[1:-1]][3:5] == ["10.0", "1"]


def test_the_control_plane_table_and_the_json() -> None:
    text = scaling_report(args(), table())
    assert "| ours | 10 | 3 / 50 |" in text
    assert text.rstrip().endswith("| floor | 20 |  |  |  |  |  | n/a |")
    assert "| floor | 10 |  |  |  |  |  | 64 |" in text
    raw = json.loads(scaling_json(args(), table()))
    runs = raw["controllers"]["ours"]["runs"]
    assert [r["creation_vs_floor"] for r in runs] == [1.2, 1.5]
    assert runs[0]["control_plane"]["etcd"] == {"cpu_s": 3.0, "peak_rss_bytes": 50 * 2**20}
    # two settled points 10 x 5 and 20 x 5 objects apart: 50 MB over 50 objects
    assert raw["controllers"]["ours"]["rss_slope_bytes_per_object"] == 2**20


def test_the_cpu_in_its_three_parts() -> None:
    text = scaling_report(args(), table())
    # start 0.5, work 1.7 - 0.5, end 2.0 - 1.7; a run without the marks says so
    assert "| ours | 10 | 0.5 / 1.2 / 0.3 |" in text
    assert "| ours | 20 | n/a |" in text
    assert "| floor | 10 | n/a |" not in text
    runs = json.loads(scaling_json(args(), table()))["controllers"]["ours"]["runs"]
    assert (runs[0]["cpu_ready_s"], runs[0]["cpu_settled_s"]) == (0.5, 1.7)


def line(agent: str, aid: str, stage: str = "ResponseComplete", **extra: object) -> bytes:
    return orjson.dumps({"auditID": aid, "stage": stage, "userAgent": agent, **extra}) + b"\n"


def test_the_scan_keeps_our_agents_lines_across_chunks_up_to_the_marker(
    tmp_path: Path, monkeypatch: object
) -> None:
    log = tmp_path / "audit.log"
    before = line("kwok/v0.8", "skip-before")
    log.write_bytes(
        before
        + line("tfjob-controller/1", "a", stage="RequestReceived", verb="get")
        + line("kwok/v0.8", "k1")
        + line("tfjob-controller/1", "a", verb="create")
        + line("tfjob-bench", "m", requestURI="/api/v1/namespaces/bench-marker-x")
        + b'{"auditID": "partial", "userAgent":"tfjob-'  # the last line, half written
    )
    monkeypatch.setattr(audit, "CHUNK", 100)  # type: ignore[attr-defined]
    scan = _Scan(log, len(before), b"bench-marker-x")
    while not scan.found:
        assert scan.step()
    assert set(scan.events) == {"a", "m"}
    assert scan.events["a"]["verb"] == "create", "ResponseComplete wins"
    assert scan.pos == log.stat().st_size - len(b'{"auditID": "partial", "userAgent":"tfjob-')


def test_etcd_db_size_is_read_off_its_metrics() -> None:
    text = b"# HELP x\netcd_mvcc_db_total_size_in_bytes 6.7108864e+07\netcd_other 1\n"
    found = _DB_SIZE.search(text)
    assert found is not None and int(float(found.group(1))) == 64 * 2**20


def test_a_status_pace_phase_runs_ours_with_the_flag_under_a_name_of_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from hack.benchmark import sampling
    from hack.benchmark.harness import ours_phase

    started: list[tuple[list[str], Path]] = []

    def fake_init(self: object, argv: list[str], health: int, log_path: Path, *_: object) -> None:
        started.append((argv, log_path))

    monkeypatch.setattr(sampling.ControllerProc, "__init__", fake_init)
    monkeypatch.setattr(sampling, "byte_compile", lambda python: None)
    env = argparse.Namespace(kubeconfig=tmp_path / "kubeconfig")
    (mode,) = parse_modes("20/30")
    shipped, paced = ours_phase(4, False), ours_phase(4, False, 0.5)
    assert (shipped.name, paced.name) == ("ours", "ours-pace500ms")
    assert re.fullmatch(r"[a-z0-9-]+", paced.name), "a part of its namespace's name"
    assert paced.title == "ours, --status-pace 0.5"
    for phase in (shipped, paced):
        phase.start(env, mode, tmp_path)  # type: ignore[arg-type]
    (plain, plain_log), (argv, log) = started
    assert not any(a.startswith("--status-pace") for a in plain)
    assert "--status-pace=0.5" in argv and "--kube-api-qps=20" in argv
    assert (plain_log.name, log.name) == ("controller-qps20.log", "ours-pace500ms-qps20.log")


def rounds_table() -> Table:
    """Two rounds at 10 jobs (ours then upstream, twice), three at 20 jobs."""
    ours = [(10, 2.0), (10, 3.0), (20, 4.0), (20, 4.4), (20, 3.6)]
    theirs = [(10, 4.0), (10, 3.0), (20, 5.0), (20, 4.0), (20, 6.0)]
    return {
        "ours": [(n, result("ours", 1.0, cpu_s=c)) for n, c in ours],
        "upstream, 4 threads": [(n, result("upstream-4t", 1.0, cpu_s=c)) for n, c in theirs],
        FLOOR: [(10, result("floor", 1.0)), (20, result("floor", 1.0))],
    }


def test_rounds_pair_each_run_of_ours_with_the_other_run_of_its_round() -> None:
    lines = scaling_report(args(), rounds_table()).splitlines()
    rows = [
        [c.strip() for c in ln.split("|")[1:-1]]
        for ln in lines
        if re.match(r"\| (10|20) \| (\d|median) \|", ln)
    ]
    assert rows == [
        ["10", "1", "2.0", "4.0", "0.50"],
        ["10", "2", "3.0", "3.0", "1.00"],
        ["10", "median", "", "", "0.75"],
        ["20", "1", "4.0", "5.0", "0.80"],
        ["20", "2", "4.4", "4.0", "1.10"],
        ["20", "3", "3.6", "6.0", "0.60"],
        ["20", "median", "", "", "0.80"],
    ]
    js = json.loads(scaling_json(args(), rounds_table()))
    assert [r["upstream, 4 threads ratio"] for r in js["cpu_rounds"]["20"]] == pytest.approx(
        [0.8, 1.1, 0.6]
    )


def test_one_round_adds_no_round_table() -> None:
    one_round = {
        title: [runs[0], next(r for r in runs if r[0] == 20)]
        for title, runs in rounds_table().items()
    }
    text = scaling_report(args(), one_round)
    assert "| ours | 10 |" in text and "| upstream, 4 threads | 20 |" in text
    assert "round by round" not in text
