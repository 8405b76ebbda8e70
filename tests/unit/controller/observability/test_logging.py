from __future__ import annotations

import io
import json
import logging

import pytest
import structlog

from controller.observability.logging import configure_logging


@pytest.fixture(autouse=True)
def _restore_logging() -> None:
    yield  # type: ignore[misc]
    structlog.reset_defaults()
    logging.getLogger().handlers.clear()


def test_json_lines_carry_contextvars() -> None:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    log = structlog.get_logger("t")
    with structlog.contextvars.bound_contextvars(key="ns/a", reconcile_id="r1"):
        log.info("reconciled", result="success", duration=0.01)
    log.debug("hidden")
    logging.getLogger("aiohttp.client").warning("from stdlib")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["event"] == "reconciled"
    assert lines[0]["key"] == "ns/a" and lines[0]["reconcile_id"] == "r1"
    assert lines[0]["level"] == "info" and lines[0]["timestamp"].endswith("Z")
    assert [entry["event"] for entry in lines] == ["reconciled", "from stdlib"]


def test_default_format_is_json_off_a_tty() -> None:
    out = io.StringIO()  # not a TTY
    configure_logging(None, "debug", stream=out)
    structlog.get_logger("t").debug("x", n=1)
    assert json.loads(out.getvalue())["n"] == 1
