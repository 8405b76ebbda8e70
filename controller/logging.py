"""structlog configuration and the --log-format/--log-level flags.

Contract: JSON lines (one object per line, orjson) when stderr is not a TTY, readable
console output on a TTY; --log-format overrides. Every line carries the contextvars
bound at the time (the runtime binds ``controller``, ``key`` and ``reconcile_id`` per
reconcile), ``level`` and an ISO-8601 UTC ``timestamp``. Messages are stable strings
in ``event``; data goes in key-value pairs. Records from the standard ``logging``
module (aiohttp, kubernetes-asyncio) are rendered the same way.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any, TextIO

import orjson
import structlog

LEVELS = ("debug", "info", "warning", "error")


def add_logging_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-format",
        choices=("json", "console"),
        default=None,
        help="log output format (default: console on a TTY, json otherwise)",
    )
    parser.add_argument("--log-level", choices=LEVELS, default="info", help="minimum level")


def _json_dumps(obj: Any, **_: Any) -> str:
    return orjson.dumps(obj, default=str).decode()


def configure_logging(
    log_format: str | None = None, level: str = "info", stream: TextIO | None = None
) -> None:
    stream = stream or sys.stderr
    if log_format is None:
        log_format = "console" if stream.isatty() else "json"
    level_no = logging.getLevelName(level.upper())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: Any
    if log_format == "json":
        renderer = structlog.processors.JSONRenderer(serializer=_json_dumps)
        shared.append(structlog.processors.dict_tracebacks)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=stream.isatty())

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level_no)
    # chatty third-party loggers only speak up for problems
    for noisy in ("aiohttp.access", "kubernetes_asyncio"):
        logging.getLogger(noisy).setLevel(max(level_no, logging.WARNING))
