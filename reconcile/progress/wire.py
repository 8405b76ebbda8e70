"""A training process's progress report as it arrives: the document, read strictly.

The wire format (docs/progress.md): one JSON object of at most MAX_BODY_BYTES,

    {"step": 1200, "totalSteps": 10000, "epoch": 3, "totalEpochs": 10,
     "metrics": {"loss": 0.31}, "sections": {"data": 0.012, "compute": 0.081},
     "final": false}

``step`` is required; everything else is optional. Unknown keys are refused rather than
dropped: a client that sends a field we ignore would believe it is shown. Every refusal
names the field, so the 400 tells the sender what to fix.

Who reports (replica type, index, pod) is never read from the document: it comes from
the token the report was authenticated with (reconcile.sync.progress).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

#: a report is a handful of numbers; anything larger is refused with 413 unread
MAX_BODY_BYTES = 16 * 1024
MAX_METRICS = 16
MAX_SECTIONS = 8
#: the largest integer a float64 holds exactly: JSON readers in other languages agree
MAX_INT = 2**53
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]{0,62}")

_KEYS = frozenset({"step", "totalSteps", "epoch", "totalEpochs", "metrics", "sections", "final"})


class ReportError(ValueError):
    """A document we refuse, and the field to blame ("" for the document itself)."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}" if field_name else message)
        self.field = field_name


@dataclass(frozen=True, slots=True)
class Report:
    step: int
    total_steps: int | None = None
    epoch: int | None = None
    total_epochs: int | None = None
    #: named numbers, the chief's shown in the job's status (loss, accuracy, ...)
    metrics: Mapping[str, float] = field(default_factory=dict)
    #: self-timed seconds of the last step's sections (data, compute, ...)
    sections: Mapping[str, float] = field(default_factory=dict)
    #: the replica's training loop ended
    final: bool = False


def parse_report(body: bytes) -> Report:
    """The report in ``body``; ReportError naming the field when it is not one."""
    if len(body) > MAX_BODY_BYTES:
        raise ReportError("", f"body of {len(body)} bytes is over {MAX_BODY_BYTES}")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise ReportError("", f"not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ReportError("", f"must be a JSON object, not {_kind(doc)}")
    unknown = sorted(set(doc) - _KEYS)
    if unknown:
        raise ReportError(unknown[0], "unknown field")
    if "step" not in doc:
        raise ReportError("step", "required")
    final = doc.get("final", False)
    if not isinstance(final, bool):
        raise ReportError("final", f"must be a boolean, not {_kind(final)}")
    return Report(
        step=_count(doc, "step", 0),
        total_steps=_optional_count(doc, "totalSteps", 1),
        epoch=_optional_count(doc, "epoch", 0),
        total_epochs=_optional_count(doc, "totalEpochs", 1),
        metrics=_numbers(doc, "metrics", MAX_METRICS, minimum=None),
        sections=_numbers(doc, "sections", MAX_SECTIONS, minimum=0.0),
        final=final,
    )


def _kind(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), "a number")


def _count(doc: Mapping[str, Any], key: str, minimum: int) -> int:
    value = doc[key]
    # bool is an int to Python, never to a JSON reader
    if not isinstance(value, int) or isinstance(value, bool):
        raise ReportError(key, f"must be an integer, not {_kind(value)}")
    if not minimum <= value <= MAX_INT:
        raise ReportError(key, f"must be between {minimum} and {MAX_INT}, not {value}")
    return value


def _optional_count(doc: Mapping[str, Any], key: str, minimum: int) -> int | None:
    return _count(doc, key, minimum) if doc.get(key) is not None else None


def _numbers(
    doc: Mapping[str, Any], key: str, limit: int, *, minimum: float | None
) -> dict[str, float]:
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ReportError(key, f"must be an object, not {_kind(value)}")
    if len(value) > limit:
        raise ReportError(key, f"at most {limit} entries, not {len(value)}")
    out: dict[str, float] = {}
    for name, number in value.items():
        where = f"{key}.{name}"[:80]
        if not NAME.fullmatch(name):
            raise ReportError(where, f"name must match {NAME.pattern}")
        if not isinstance(number, int | float) or isinstance(number, bool):
            raise ReportError(where, f"must be a number, not {_kind(number)}")
        number = float(number)
        if not math.isfinite(number):
            raise ReportError(where, "must be finite")
        if minimum is not None and number < minimum:
            raise ReportError(where, f"must be at least {minimum}")
        out[name] = number
    return out
