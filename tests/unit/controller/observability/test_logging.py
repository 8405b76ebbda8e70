from __future__ import annotations

import io
import json
import logging

import pytest
import structlog

from controller.observability.logging import configure_logging, redact, remember_secret


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


def test_a_credential_learnt_later_is_redacted_from_text_seen_before() -> None:
    """Short values are redacted once and the result kept: a credential the client
    learns afterwards (a rotated token) must still be taken out of them."""
    secret = "rotated-9f8e7d6c5b4a"
    text = f"pod ns/a said {secret}"
    assert redact(text) == text  # nothing shaped like a credential: kept as it is
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    structlog.get_logger("t").info("seen", detail=text)
    remember_secret(secret)
    structlog.get_logger("t").info("seen", detail=text)
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["detail"] == text
    assert secret not in second["detail"] and second["detail"].endswith("[REDACTED]")
    assert redact(text) == second["detail"]


def test_the_redaction_memo_is_bounded_and_skips_long_text() -> None:
    from controller.observability import logging as log_mod

    for i in range(log_mod._SEEN_MAX + 10):
        redact(f"reconcile {i:08x}")
    assert len(log_mod._seen) <= log_mod._SEEN_MAX
    long = "x" * (log_mod._SEEN_LONGEST + 1)
    assert redact(long) == long and long not in log_mod._seen
