"""Every way the project itself starts tfjob-controller passes its argument parser and
start-up checks, so that a new start-up rule cannot break one of them unseen (secure
metrics once broke `make run` this way: two ``127.0.0.1:0`` addresses read as one).

The callers: `make run` and `make run-tf` (hack/run_local), the benchmarks (hack/
benchmark, hack/bench_progress, hack/bench_failover), config/'s Deployment and the
image test (hack/image-test.sh). The chart renders through helm: test_helm_chart.py
checks its variants the same way (tests/invocations.py).
"""

from __future__ import annotations

import re
import shlex
import ssl
from pathlib import Path

import pytest
import yaml

from hack import bench_failover, bench_progress, run_local
from hack.benchmark.common import Mode
from hack.benchmark.environment import Env
from hack.benchmark.sampling import client_flags
from tests.conftest import REPO
from tests.invocations import check_invocation, check_refused

CLUSTER = Path("/nonexistent/cluster")
PKI = CLUSTER / "pki"


def test_make_run_and_run_tf(capsys: pytest.CaptureFixture[str]) -> None:
    progress = run_local.progress_args("10.0.0.5", 23456, PKI)
    argv = run_local.controller_argv("tfjob-controller", CLUSTER, progress)
    check_invocation(argv[1:], capsys)
    assert "--metrics-bind-address=127.0.0.1:0" in argv  # the case that broke


@pytest.mark.parametrize("mode", [Mode(20, 30), Mode(0, 0)], ids=["20/30", "unlimited"])
@pytest.mark.parametrize("extra", [[], ["--status-pace=0.2"]], ids=["default", "paced"])
def test_the_benchmark(mode: Mode, extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    env = Env(
        CLUSTER,
        CLUSTER / "kubeconfig",
        "https://127.0.0.1:6443",
        ssl.create_default_context(),
        CLUSTER / "audit",
    )
    flags = [*client_flags(env, mode, 4, 23457), "--log-format=json", *extra]
    check_invocation(flags, capsys)


def test_the_progress_and_failover_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    progress = run_local.progress_args("10.0.0.5", 23456, PKI)
    check_invocation(bench_progress.controller_argv(CLUSTER, 23458, 20.0, 30, progress)[1:], capsys)
    check_invocation(bench_failover.ours_argv(CLUSTER, 20.0)[1:], capsys)


def test_config_deployment(capsys: pytest.CaptureFixture[str]) -> None:
    docs = yaml.safe_load_all((REPO / "config" / "manager" / "deployment.yaml").read_text())
    (dep,) = [d for d in docs if d and d.get("kind") == "Deployment"]
    (manager,) = dep["spec"]["template"]["spec"]["containers"]
    check_invocation(manager["args"], capsys)


def image_test_args(script: str, ports: dict[str, str]) -> list[str]:
    """The controller's arguments in hack/image-test.sh (its array ``args``), with the
    shell variables it names given ``ports``' values."""
    found = re.search(r"^\s*local args=\(\n(.*?)^\s*\)\n", script, re.M | re.S)
    assert found, "hack/image-test.sh no longer has its `local args=(...)` array"
    text = re.sub(r"\$(\w+)", lambda m: ports[m.group(1)], found.group(1))
    return shlex.split(text)


def test_the_image_test(capsys: pytest.CaptureFixture[str]) -> None:
    script = (REPO / "hack" / "image-test.sh").read_text()
    args = image_test_args(script, {"metrics": "23459", "probes": "23460"})
    assert "--metrics-bind-address" in args
    assert '"${args[@]}"' in script  # the array is what docker run is given
    check_invocation(args, capsys)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--metrics-bind-address=127.0.0.1:9443", "--health-probe-bind-address=127.0.0.1:9443"],
            "probes on a socket of their own",
        ),
        (
            ["--metrics-bind-address=:9443", "--health-probe-bind-address=0.0.0.0:9443"],
            "probes on a socket of their own",
        ),
        (
            [
                "--metrics-secure=false",
                "--metrics-bind-address=:9443",
                "--health-probe-bind-address=127.0.0.1:9443",
            ],
            "overlapping interfaces",
        ),
        (
            ["--progress-url=https://x:8081", "--progress-bind-address=:8081"],
            "--progress-bind-address :8081 would share a socket with --health-probe-bind-address",
        ),
        (
            ["--progress-url=https://x:8443", "--progress-bind-address=127.0.0.1:8443"],
            "would share a socket with --metrics-bind-address",
        ),
        (["--metrics-bind-address=9443"], "has no port"),
        (["--progress-url=https://x:1", "--progress-bind-address=:http"], "is not a number"),
    ],
)
def test_sockets_that_cannot_be_bound_are_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    check_refused(argv, message, capsys)


@pytest.mark.parametrize(
    "argv",
    [
        # two ephemeral ports are two sockets: make run's flags, secure metrics on
        ["--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"],
        ["--metrics-bind-address=:0", "--health-probe-bind-address=:0"],
        ["--metrics-bind-address=127.0.0.1:9443", "--health-probe-bind-address=127.0.0.2:9443"],
        # plain metrics may share the probes' socket: one server serves both
        ["--metrics-secure=false", "--metrics-bind-address=:8081"],
        ["--metrics-bind-address=0", "--health-probe-bind-address=0"],
        # the progress port is checked only when reporting is on
        ["--progress-bind-address=:8081"],
        ["--progress-url=https://x:1", "--progress-bind-address=127.0.0.1:0",
         "--health-probe-bind-address=127.0.0.1:0"],
    ],
)  # fmt: skip
def test_sockets_that_can_be_bound_are_accepted(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    check_invocation(argv, capsys)
