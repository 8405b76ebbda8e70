"""structlog configuration and the --log-format/--log-level flags.

Contract: JSON lines (one object per line, orjson) when stderr is not a TTY, readable
console output on a TTY; --log-format overrides. Every line carries the contextvars
bound at the time (the runtime binds ``controller``, ``key`` and ``reconcile_id`` per
reconcile), ``level`` and an ISO-8601 UTC ``timestamp``. Messages are stable strings
in ``event``; data goes in key-value pairs. Records from the standard ``logging``
module (kubernetes-asyncio's) are rendered the same way.

Secrets: tracebacks are rendered without local variables (a request's locals hold its
Authorization header), and every string that reaches the output, exception text
included, passes through ``redact``, which strips credentials by their shape
(Authorization values, bearer tokens, JWTs, PEM private keys, password and token
parameters) wherever they appear.
"""

from __future__ import annotations

import argparse
import logging
import re
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


_REDACTED = "[REDACTED]"
_SECRET_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.S
        ),
        "[REDACTED PRIVATE KEY]",
    ),
    # "Authorization: Bearer x", "'Authorization': 'Basic x'", "authorization=x"
    (
        re.compile(r"""(?i)(\bauthorization['"]?\s*[:=]\s*['"]?)[^'"\n,;}]+"""),
        rf"\1{_REDACTED}",
    ),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{4,}"), rf"\1 {_REDACTED}"),
    (re.compile(r"\beyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"), _REDACTED),
    (
        re.compile(
            r"""(?i)\b((?:password|passwd|token|api[_-]?key|secret|client[_-]?key(?:[_-]?data)?)['"]?\s*[:=]\s*['"]?)[^'"\s&,;}]+"""
        ),
        rf"\1{_REDACTED}",
    ),
]


#: Every pattern above needs one of these words (or the start of a JWT) to match.
_MAYBE_SECRET = re.compile(
    r"(?i)authorization|bearer|basic|eyJ|private key|passw|token|secret|api[_-]?key|client[_-]?key"
)
#: Credentials this process holds (the client adds each one it sends), removed
#: verbatim: a bare token has no shape to recognise it by.
_known_secrets: set[str] = set()


#: Short values already redacted, and what they became: the per-reconcile summary line
#: carries the same few strings (a job's key, the controller's name, an outcome) again
#: and again. Emptied whenever a credential is added, and when full.
_seen: dict[str, str] = {}
_SEEN_MAX = 4096
_SEEN_LONGEST = 256


def remember_secret(value: str) -> None:
    """Redact ``value`` (and, for "Bearer x"/"Basic x", x) from every log line."""
    for secret in (value, value.partition(" ")[2]):
        if len(secret) >= 6 and secret not in _known_secrets:
            _known_secrets.add(secret)
            _seen.clear()  # what was redacted before may hold this one


def redact(text: str) -> str:
    """``text`` with every known credential, and anything shaped like one, replaced
    by a marker."""
    done = _seen.get(text)
    if done is not None:
        return done
    out = _redact(text)
    if len(text) <= _SEEN_LONGEST:
        if len(_seen) >= _SEEN_MAX:
            _seen.clear()
        _seen[text] = out
    return out


def _redact(text: str) -> str:
    for secret in _known_secrets:
        if secret in text:
            text = text.replace(secret, _REDACTED)
    if _MAYBE_SECRET.search(text) is None:  # one scan: most log values hold no secret
        return text
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


#: Values that cannot hold a credential: passed through without a look (most of the
#: values of the per-reconcile summary line are counts, flags and durations).
_PLAIN = frozenset({int, float, bool, type(None)})


def _redact_value(value: Any) -> Any:
    if type(value) in _PLAIN:
        return value
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(v) for v in value]
    if isinstance(value, BaseException):
        return redact(f"{type(value).__name__}: {value}")
    return value


def _redact_event(_logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    # the common kinds inline: once per reconcile, for each of its summary's fields
    for key, value in event.items():
        kind = type(value)
        if kind in _PLAIN:
            out[key] = value
        elif kind is str:
            out[key] = redact(value)
        else:
            out[key] = _redact_value(value)
    return out


def _json_dumps(obj: Any, **_: Any) -> str:
    return orjson.dumps(obj, default=str).decode()


class _LineLogger:
    """Where structlog's own loggers write: each rendered line, straight to the stream.
    Going through the standard ``logging`` module instead (a record, the caller's frame
    looked up, a handler lock, a formatter copying the record) cost more than the
    rendering itself, once per reconcile."""

    __slots__ = ("_stream", "name")

    def __init__(self, name: str, stream: TextIO) -> None:
        self.name = name
        self._stream = stream

    def msg(self, line: str) -> None:
        self._stream.write(line + "\n")
        self._stream.flush()

    debug = info = warning = warn = error = err = critical = fatal = exception = msg


def configure_logging(
    log_format: str | None = None, level: str = "info", stream: TextIO | None = None
) -> None:
    out = stream or sys.stderr
    if log_format is None:
        log_format = "console" if out.isatty() else "json"
    level_no = logging.getLevelName(level.upper())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    # Exceptions, redaction and rendering: the same steps for structlog's lines and for
    # records of the standard logging module (kubernetes-asyncio's).
    final: list[Any] = []
    if log_format == "json":
        exceptions = structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
        final.append(structlog.processors.ExceptionRenderer(exceptions))
        renderer: Any = structlog.processors.JSONRenderer(serializer=_json_dumps)
    else:
        # Plain text, so the redactor sees the traceback before the renderer does.
        final.append(structlog.processors.format_exc_info)
        renderer = structlog.dev.ConsoleRenderer(
            colors=out.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
    final += [_redact_event, renderer]

    structlog.configure(
        processors=[*shared, *final],
        logger_factory=lambda name="", *_: _LineLogger(name, out),
        wrapper_class=structlog.make_filtering_bound_logger(level_no),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level_no)
    # a chatty third-party logger only speaks up for problems
    logging.getLogger("kubernetes_asyncio").setLevel(max(level_no, logging.WARNING))
