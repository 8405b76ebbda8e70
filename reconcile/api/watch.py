"""A job's stall, restart-guard and straggler settings, read from its annotations
(docs/stalls.md).

Annotations, as whole-gang restart is, so the upstream v1 schema stays as it is and a
job that sets none behaves exactly as before. Read with the spec (reconcile.api.spec,
memoized with it); a value that does not parse makes the job invalid, naming the
annotation (reconcile.api.validation), rather than being ignored: a deadline the user
believes is set and is not would be found out only after hours of a stalled job.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from reconcile.api.names import (
    FIRST_PROGRESS_DEADLINE_ANNOTATION,
    PROGRESS_DEADLINE_ANNOTATION,
    RESTART_GUARD_ANNOTATION,
    STALL_ACTION_ANNOTATION,
    STRAGGLER_ACTION_ANNOTATION,
    STRAGGLER_THRESHOLD_ANNOTATION,
)

#: restarts in a row without progress that fail a job that reports progress (NVIDIA's
#: resiliency extension stops after 3 such cycles too)
DEFAULT_RESTART_GUARD = 3
#: with a progress deadline and no first-progress deadline, the first report may take
#: this many times as long: a process imports TensorFlow, builds its dataset, joins its
#: peers and perhaps restores a checkpoint before its first step
FIRST_DEADLINE_FACTOR = 3
#: 30 days: a deadline longer than that is a mistake, not a setting
MAX_DEADLINE_SECONDS = 30 * 86400
MAX_RESTART_GUARD = 1000
#: a replica slower than this fraction of its peers is a straggler (NVIDIA's resiliency
#: extension flags a rank under 0.75 of the reference too)
DEFAULT_STRAGGLER_THRESHOLD = 0.75


#: "0", "0.75", "1", ".5": plain decimals, no exponent, no sign
_FRACTION = re.compile(r"[0-9]{1,3}(\.[0-9]{1,6})?|\.[0-9]{1,6}")


class StallAction(StrEnum):
    """What a stall does besides the Stalled condition and its event."""

    REPORT = "report"
    RESTART = "restart"  # a whole-gang restart, counted against backoffLimit
    FAIL = "fail"


class StragglerAction(StrEnum):
    """What a straggler's flag does besides the status entry and its event."""

    REPORT = "report"
    MOVE = "move"  # replaced, away from its node


@dataclass(frozen=True, slots=True)
class TrainingWatch:
    #: seconds without any replica's step advancing, once the run has reported
    progress_deadline: int | None = None
    #: seconds from Running to the run's first progress
    first_progress_deadline: int | None = None
    stall_action: StallAction = StallAction.REPORT
    #: restarts in a row without progress that fail the job; 0 turns the guard off
    restart_guard: int = DEFAULT_RESTART_GUARD
    #: flagged below this fraction of its peers' speed; 0 turns detection off
    straggler_threshold: float = DEFAULT_STRAGGLER_THRESHOLD
    straggler_action: StragglerAction = StragglerAction.REPORT

    @property
    def watches_stalls(self) -> bool:
        return self.progress_deadline is not None or self.first_progress_deadline is not None


NO_WATCH = TrainingWatch()
E = TypeVar("E", StallAction, StragglerAction)


def read_watch(metadata: Mapping[str, Any]) -> tuple[TrainingWatch, list[tuple[str, str]]]:
    """The settings, and (annotation, message) for each value that does not parse (left
    at its default)."""
    found = metadata.get("annotations")
    if not isinstance(found, Mapping):
        return NO_WATCH, []
    annotations: Mapping[str, Any] = found
    errors: list[tuple[str, str]] = []

    def number(key: str, least: int, most: int) -> int | None:
        raw = annotations.get(key)
        if raw is None:
            return None
        text = str(raw).strip()
        # ASCII digits only (str.isdigit takes any script's), and few of them: int()
        # refuses a string of over 4,300 digits with an error of its own
        plain = text.isascii() and text.isdigit() and len(text) <= 10
        if not plain or not least <= int(text) <= most:
            errors.append((key, f"must be a whole number from {least} to {most}, not {raw!r:.40}"))
            return None
        return int(text)

    progress = number(PROGRESS_DEADLINE_ANNOTATION, 1, MAX_DEADLINE_SECONDS)
    first = number(FIRST_PROGRESS_DEADLINE_ANNOTATION, 1, MAX_DEADLINE_SECONDS)
    if first is None and progress is not None:
        first = min(MAX_DEADLINE_SECONDS, progress * FIRST_DEADLINE_FACTOR)

    def choice(key: str, kind: type[E], default: E) -> E:
        raw = annotations.get(key)
        if raw is None:
            return default
        text = str(raw).strip().lower()
        if text in {a.value for a in kind}:
            return kind(text)
        allowed = ", ".join(a.value for a in kind)
        errors.append((key, f"must be one of {allowed}, not {raw!r:.40}"))
        return default

    def fraction(key: str, default: float) -> float:
        raw = annotations.get(key)
        if raw is None:
            return default
        text = str(raw).strip()
        if _FRACTION.fullmatch(text) and float(text) <= 1:
            return float(text)
        errors.append((key, f"must be a decimal number from 0 to 1, not {raw!r:.40}"))
        return default

    guard = number(RESTART_GUARD_ANNOTATION, 0, MAX_RESTART_GUARD)
    watch = TrainingWatch(
        progress_deadline=progress,
        first_progress_deadline=first,
        stall_action=choice(STALL_ACTION_ANNOTATION, StallAction, StallAction.REPORT),
        restart_guard=DEFAULT_RESTART_GUARD if guard is None else guard,
        straggler_threshold=fraction(STRAGGLER_THRESHOLD_ANNOTATION, DEFAULT_STRAGGLER_THRESHOLD),
        straggler_action=choice(
            STRAGGLER_ACTION_ANNOTATION, StragglerAction, StragglerAction.REPORT
        ),
    )
    return watch, errors
