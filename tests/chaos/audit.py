"""The apiserver's audit log, read as it grows, and the invariants it proves.

Each controller replica sends ``User-Agent: tfjob-controller/<identity>`` (workload) and
``tfjob-controller-leader-election/<identity>`` (its Lease), and the chaos audit policy
logs Lease writes with their bodies, so the log says who held the Lease from when and who
sent every write. Checked as the log grows:

- **fencing**: every write by replica X is received while the last Lease write before it
  names X as holder, and within the lease duration of that write; a write after another
  replica's acquire (or after X's release) is a violation;
- **no duplicate creates**: a create by the controller answered 409.

The log is read from a file offset, holding a partial last line until it is complete and
following a rotation (lumberjack renames the file at its size limit). A SIGKILLed
apiserver may leave half a line; it is skipped.
"""

from __future__ import annotations

import bisect
import itertools
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from tests.chaos.violations import Violations

WORKLOAD_UA = "tfjob-controller/"
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
#: A write is judged once the log has moved this far past it, so every Lease write
#: received before it is in (the log is written in completion order, not receipt order).
SETTLE_SECONDS = 5.0


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


class AuditTail:
    """New complete events of the log, on each ``read()``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._f: BinaryIO | None = None
        self._partial = b""

    def _open(self) -> None:
        if self._f is None and self.path.exists():
            self._f = open(self.path, "rb")

    def read(self) -> list[dict[str, Any]]:
        self._open()
        if self._f is None:
            return []
        data = self._f.read()
        try:
            rotated = os.stat(self.path).st_ino != os.fstat(self._f.fileno()).st_ino
        except FileNotFoundError:
            rotated = False
        if rotated:
            self._f.close()
            self._f = None
            self._open()
            if self._f is not None:
                data += b"\n" + self._f.read()
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        out = []
        for line in lines:
            if not line.strip():
                continue
            try:
                ev = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # half a line left by a killed apiserver
            if ev.get("stage") in ("ResponseComplete", "Panic"):
                out.append(ev)
        return out

    def close(self) -> None:
        if self._f is not None:
            self._f.close()


@dataclass(frozen=True)
class LeaseWrite:
    t: float
    holder: str
    verb: str


@dataclass(frozen=True)
class Write:
    t: float
    identity: str
    verb: str
    resource: str
    name: str
    code: int


@dataclass
class AuditChecks:
    lease_ns: str
    lease_name: str
    violations: Violations
    lease_duration: float = 15.0
    leases: list[LeaseWrite] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    creates_409: int = 0
    events_seen: int = 0
    _pending: list[Write] = field(default_factory=list)
    _watermark: float = 0.0

    def feed(self, events: list[dict[str, Any]]) -> None:
        for ev in events:
            self.events_seen += 1
            self._watermark = max(self._watermark, ts(ev["stageTimestamp"]))
            ref = ev.get("objectRef") or {}
            verb = ev.get("verb", "")
            code = int((ev.get("responseStatus") or {}).get("code") or 0)
            resource = ref.get("resource", "") + (
                "/" + ref["subresource"] if ref.get("subresource") else ""
            )
            t = ts(ev["requestReceivedTimestamp"])
            if (
                resource == "leases"
                and ref.get("namespace") == self.lease_ns
                and ref.get("name", (ev.get("requestObject") or {}).get("metadata", {}).get("name"))
                == self.lease_name
                and verb in ("create", "update", "patch")
                and code in (200, 201)
            ):
                spec = (ev.get("requestObject") or {}).get("spec") or {}
                bisect.insort(
                    self.leases,
                    LeaseWrite(t, spec.get("holderIdentity") or "", verb),
                    key=lambda w: w.t,
                )
                continue
            agent = ev.get("userAgent") or ""
            if not agent.startswith(WORKLOAD_UA) or verb not in WRITE_VERBS:
                continue
            identity = agent[len(WORKLOAD_UA) :].split(" ", 1)[0]
            w = Write(t, identity, verb, resource, ref.get("name", ""), code)
            self.writes.append(w)
            self._pending.append(w)
            if verb == "create" and code == 409:
                self.creates_409 += 1
                self.violations.add(
                    "duplicate-create", f"{identity} create {resource}/{w.name} answered 409", t
                )
        self._judge(final=False)

    def _judge(self, final: bool) -> None:
        keep = []
        for w in self._pending:
            if not final and w.t > self._watermark - SETTLE_SECONDS:
                keep.append(w)
                continue
            problem = self.fence_problem(w)
            if problem:
                self.violations.add("fencing", problem, w.t)
        self._pending = keep

    def finish(self, events: list[dict[str, Any]]) -> None:
        self.feed(events)
        self._judge(final=True)

    def holder_at(self, t: float) -> LeaseWrite | None:
        i = bisect.bisect_right(self.leases, t, key=lambda w: w.t)
        return self.leases[i - 1] if i else None

    def fence_problem(self, w: Write) -> str | None:
        what = f"{w.verb} {w.resource}/{w.name} ({w.code}) by {w.identity}"
        last = self.holder_at(w.t)
        if last is None:
            return f"{what}: no Lease write before it"
        if last.holder != w.identity:
            held = f"held by {last.holder}" if last.holder else "released"
            return f"{what}: the Lease was {held} since {w.t - last.t:.2f}s before"
        # The holder's last renewal before the write: it must still be current.
        if w.t - last.t > self.lease_duration:
            return f"{what}: {w.t - last.t:.1f}s after its last renewal"
        return None

    # --- failovers ----------------------------------------------------------------

    def successor(self, died: str, t: float) -> tuple[str, float, float | None] | None:
        """After ``died`` lost the lead at ``t``: (the next holder, seconds to its first
        Lease write as holder, seconds to its first workload write)."""
        i = bisect.bisect_left(self.leases, t, key=lambda w: w.t)
        for lw in self.leases[i:]:
            if lw.holder and lw.holder != died:
                first = next(
                    (w.t for w in self.writes if w.identity == lw.holder and w.t >= t), None
                )
                return lw.holder, lw.t - t, None if first is None else first - t
        return None

    def transitions(self) -> int:
        """How many times the Lease changed hands (releases not counted)."""
        holders = [lw.holder for lw in self.leases if lw.holder]
        return sum(1 for a, b in itertools.pairwise(holders) if a != b)
