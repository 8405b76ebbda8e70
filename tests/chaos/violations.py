"""The violations found, as they are found (printed at once, kept for the report)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.chaos.progress import say


@dataclass
class Violations:
    items: list[dict[str, Any]] = field(default_factory=list)
    by_kind: Counter[str] = field(default_factory=Counter)
    #: the same problem seen again (a watch relist, a status re-read) is reported once
    _seen: set[tuple[str, str]] = field(default_factory=set)

    def add(self, kind: str, what: str, t: float | None = None) -> None:
        if (kind, what) in self._seen:
            return
        self._seen.add((kind, what))
        self.by_kind[kind] += 1
        self.items.append({"kind": kind, "what": what, "t": t if t is not None else time.time()})
        say(f"VIOLATION {kind}: {what}")

    def __len__(self) -> int:
        return len(self.items)
