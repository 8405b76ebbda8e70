"""Small recording fakes shared by unit tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class RecordingEvents:
    """An EventSink that remembers the reasons it was given, in order."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.reasons.append(reason)
