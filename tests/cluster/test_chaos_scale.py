"""The chaos suite (tests/chaos), short and seeded, inside make test: 12 TFJobs, 50 pod
faults, 3 controller SIGKILLs (one in the initial create burst, one in a resume burst),
a leader partition, an apiserver and an etcd restart, watch faults and two suspend/resume
waves, against two leader-elected replicas behind fault proxies. The run has a cluster of
its own (.cluster-chaos-test/, audit log on), since it restarts the apiserver and etcd,
and removes it afterwards; every invariant must hold (tests/chaos/__init__.py).

`make chaos` runs the full size with seeds 1 2 3.

Seed note: with the controller of commit 6e47b6c this seed ran clean (twice). With the
tracking finalizer (commit 5e85b5b) it found a lost outcome: right after a resume and a
failover, `alw-04-worker-1` was evicted (12:54:54.730 in that run), its finalizer came
off 86 ms later and it was replaced, but no disruption was ever counted (Worker
disruptions 0, one eviction done): the pod was created in the second the job resumed
and taken for a suspend leftover, fixed in 051e12c. Later it counted three Worker
disruptions of exc-08 too many: a replica whose pod watch was cut saw the suspend's own
kills only after the resume (fixed in 07eb2c9). The report and audit log go to
chaos-out/test/.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

#: needs the chaos harness: kwok pods, apiserver and etcd restarts
pytestmark = pytest.mark.local_only

SEED = 11
SHORT = (
    "--jobs=12",
    "--kills=50",
    "--exits=8",
    "--controller-kills=3",
    "--partitions=1",
    "--apiserver-restarts=1",
    "--etcd-restarts=1",
    "--suspend-waves=2",
    "--watch-fault-every=20",
    "--duration=75",
)


#: The run's own waits are bounded (a job that never recovers is a violation after 180
#: s, orphans after another 180 s), so a run whose controller is stuck ends with a report
#: naming it well within this; only a run that hangs outright meets it.
RUN_LIMIT = 540


@pytest.mark.timeout(RUN_LIMIT + 90)
def test_short_seeded_chaos_run_breaks_no_invariant() -> None:
    # The report, the replicas' logs, the run's output and (on a violation or an
    # interrupt) the audit log and a snapshot of every job and pod are kept.
    out = REPO / "chaos-out" / "test"
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "TFJOB_CLUSTER_DIR"}
    rc, said = run_logged(
        [
            sys.executable,
            "-m",
            "tests.chaos",
            f"--seed={SEED}",
            *SHORT,
            f"--out={out}",
            f"--cluster-dir={REPO / '.cluster-chaos-test'}",
        ],
        out / f"seed-{SEED}-run.log",
        env,
    )
    report_file = out / f"seed-{SEED}.json"
    assert report_file.exists(), said
    report = json.loads(report_file.read_text())
    assert report["violations"] == [], said
    assert rc == 0, said
    # The faults really happened (a fault waits for a fair target; a few may not get one).
    assert sum(report["faults"].values()) >= 45, report["faults"]
    assert set(report["faults"]) >= {"graceful", "force", "evict", "exit137"}, report["faults"]
    actions = report["actions"]
    assert actions["controller-kill"] == 3, actions
    assert actions["partition"] == 1, actions
    assert actions["apiserver-restart"] == 1 and actions["etcd-restart"] == 1, actions
    assert actions["suspend-wave"] == 2, actions
    assert sum(report["watch_faults"].values()) >= 2, report["watch_faults"]
    # Each leader death was followed by a successor, within the lease duration plus retry
    # (and a margin for this 2-core machine's load).
    assert report["failovers"], report
    for f in report["failovers"]:
        assert f["successor"] is not None, f
        assert f["acquire_s"] <= 20, f
    assert not (REPO / ".cluster-chaos-test").exists()


def run_logged(argv: list[str], log: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run ``argv`` with its output in ``log``. One that overruns RUN_LIMIT gets SIGINT,
    so it stops its replicas, keeps its logs and a snapshot of the cluster and takes its
    cluster down, then SIGKILL a minute later: the tail then says where it stood. Returns
    the exit status and the output's tail."""
    with log.open("wb") as sink:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            rc = proc.wait(timeout=RUN_LIMIT)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            pytest.fail(f"the chaos run overran {RUN_LIMIT}s; {evidence(log)}")
    return rc, evidence(log)


def evidence(log: Path) -> str:
    """The run's output tail and, where it left one, its snapshot: all CI shows of it."""
    text = f"its output ends:\n{log.read_text(errors='replace')[-9000:]}"
    state = log.with_name(f"seed-{SEED}-state.txt")
    if state.exists():
        text += f"\nits snapshot:\n{state.read_text(errors='replace')[:12000]}"
    return text
