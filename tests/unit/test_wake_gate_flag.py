"""``--event-loop`` and ``--wake-gate``: the gated asyncio loop under a client-side rate
limit, uvloop without one, and what an operator asks for over either."""

from __future__ import annotations

from typing import Any

import pytest
import uvloop

from controller.runtime.eventloop import GatedSelector
from tests.invocations import check_refused
from tfjob_controller import app
from tfjob_controller.app import MAX_WAKE_GATE, WAKE_GATE_UNDER_QPS, parse_args


@pytest.mark.parametrize(
    ("argv", "loop", "gate"),
    [
        ([], "asyncio", WAKE_GATE_UNDER_QPS),
        (["--kube-api-qps=0"], "uvloop", 0.0),
        (["--kube-api-qps=-1"], "uvloop", 0.0),
        (["--event-loop=uvloop"], "uvloop", 0.0),
        (["--wake-gate=0"], "uvloop", 0.0),
        (["--wake-gate=0.2"], "asyncio", 0.2),
        (["--wake-gate=0.1", "--kube-api-qps=0"], "asyncio", 0.1),
        (["--event-loop=asyncio", "--kube-api-qps=0"], "asyncio", 0.0),
        (["--event-loop=asyncio", "--wake-gate=0"], "asyncio", 0.0),
    ],
)
def test_the_loop_and_its_gate(argv: list[str], loop: str, gate: float) -> None:
    args = parse_args(argv)
    assert (args.event_loop, args.wake_gate) == (loop, gate)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--wake-gate=-0.01"], "--wake-gate must be between 0 and"),
        ([f"--wake-gate={MAX_WAKE_GATE + 0.5}"], "--wake-gate must be between 0 and"),
        (["--event-loop=uvloop", "--wake-gate=0.05"], "uvloop cannot be gated"),
    ],
)
def test_a_gate_that_cannot_be_had_is_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    check_refused(argv, message, capsys)


def test_main_runs_the_controller_on_the_loop_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    options: list[dict[str, Any]] = []

    def run(func: object, *args: object, backend: str, backend_options: dict[str, Any]) -> int:
        assert backend == "asyncio"
        options.append(backend_options)
        return 0

    monkeypatch.setattr(app.anyio, "run", run)
    monkeypatch.setattr(app, "configure_logging", lambda *_: None)
    for argv in ([], ["--kube-api-qps=0"]):
        with pytest.raises(SystemExit):
            app.main(argv)
    gated, plain = (o["loop_factory"] for o in options)
    assert plain is uvloop.new_event_loop
    loop = gated()
    try:
        selector = loop._selector  # type: ignore[attr-defined]
        assert isinstance(selector, GatedSelector) and selector.gate == WAKE_GATE_UNDER_QPS
    finally:
        loop.close()
