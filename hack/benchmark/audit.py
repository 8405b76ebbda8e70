"""The apiserver's audit log, read from an offset: every request with its server-side
timestamp, user agent, verb, resource and code, summed per phase."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from hack.benchmark.client import Http
from hack.benchmark.common import FLOOR_UA, HARNESS_UA, say
from hack.benchmark.environment import Env


def audit_offset(env: Env) -> int:
    return env.audit.stat().st_size


#: every request the benchmark counts carries a user agent starting "tfjob-" (ours, the
#: floor's, the harness's, upstream's under our wrapper): other lines are skipped unparsed
#: (at 5,000 jobs the phase's log is gigabytes, mostly kwok's and KCM's requests)
OUR_AGENTS = b'"userAgent":"tfjob-'
#: how much of the log is read at a time
CHUNK = 64 * 2**20


def _ts(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


@dataclass
class _Scan:
    """Where a read of the log has got to: the next byte, the events kept so far (by
    audit ID, the ResponseComplete stage winning), whether the marker was seen."""

    path: Path
    pos: int
    marker: bytes
    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    found: bool = False
    read: int = 0

    def step(self) -> bool:
        """Read and digest the next chunk's whole lines; False when none was there."""
        with open(self.path, "rb") as f:
            f.seek(self.pos)
            data = f.read(CHUNK)
            while b"\n" not in data:  # a line longer than a chunk: read on to its end
                more = f.read(CHUNK)
                if not more:
                    return False
                data += more
        end = data.rfind(b"\n") + 1
        self.pos += end
        self.read += end
        for line in data[:end].splitlines():
            if OUR_AGENTS not in line:
                continue
            if self.marker in line:
                self.found = True
            try:
                ev = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            aid = ev.get("auditID")
            if ev.get("stage") == "ResponseComplete" or aid not in self.events:
                self.events[aid] = ev
        return True


async def audit_read(env: Env, http: Http, start: int) -> list[dict[str, Any]]:
    """Our agents' audit events from byte ``start`` up to a marker request sent now
    (batch mode writes asynchronously, so read on until the marker is on disk), a chunk at
    a time."""
    marker = f"bench-marker-{uuid.uuid4().hex[:12]}"
    await http.req("GET", f"/api/v1/namespaces/{marker}")
    scan = _Scan(env.audit, start, marker.encode())
    deadline = time.monotonic() + 60
    while not scan.found:
        if await asyncio.to_thread(scan.step):
            deadline = max(deadline, time.monotonic() + 60)  # still reading: not stuck
            continue
        if time.monotonic() > deadline:
            rotated = env.audit.stat().st_size < start
            why = " (the audit log was rotated)" if rotated else ""
            say(f"WARNING: audit marker not seen after 60s{why}; counting what is there")
            break
        await asyncio.sleep(0.3)
    say(f"audit log: {len(scan.events)} requests of ours ({scan.read / 2**20:.0f} MB) read")
    return list(scan.events.values())


@dataclass
class Requests:
    by_verb: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # verb,res,code
    creates_t: list[float] = field(default_factory=list)  # completion times of 201 creates
    first_submit: float | None = None
    #: the controller's first list (its informers starting), server clock
    first_list: float | None = None

    def count(self, verb: str, resource: str, code: str | None = None) -> int:
        return sum(
            n
            for (v, r, c), n in self.by_verb.items()
            if v == verb and r == resource and (code is None or c == code)
        )

    def total(self, verbs: tuple[str, ...], resources: tuple[str, ...]) -> int:
        return sum(n for (v, r, _c), n in self.by_verb.items() if v in verbs and r in resources)

    def creation_time(self, objects: int) -> float | None:
        """First TFJob submitted -> the objects-th successful create (server clock)."""
        if self.first_submit is None or len(self.creates_t) < objects:
            return None
        return self.creates_t[objects - 1] - self.first_submit


def summarize_audit(events: list[dict[str, Any]], ua: str, ns: str) -> Requests:
    out = Requests()
    for ev in events:
        ref = ev.get("objectRef") or {}
        agent = ev.get("userAgent") or ""
        if agent.startswith(HARNESS_UA) and not agent.startswith(FLOOR_UA):
            if (
                ev.get("verb") == "create"
                and ref.get("resource") == "tfjobs"
                and ref.get("namespace") == ns
            ):
                t = _ts(ev["requestReceivedTimestamp"])
                out.first_submit = t if out.first_submit is None else min(out.first_submit, t)
            continue
        if not agent.startswith(ua):
            continue
        if ref.get("namespace") not in (None, "", ns):
            continue
        resource = ref.get("resource", "?") + (
            "/" + ref["subresource"] if ref.get("subresource") else ""
        )
        code = str((ev.get("responseStatus") or {}).get("code", "?"))
        verb = ev.get("verb", "?")
        out.by_verb[(verb, resource, code)] += 1
        if verb == "list":
            t = _ts(ev["requestReceivedTimestamp"])
            out.first_list = t if out.first_list is None else min(out.first_list, t)
        if verb == "create" and resource in ("pods", "services") and code == "201":
            out.creates_t.append(_ts(ev["stageTimestamp"]))
        if verb == "create" and resource == "tfjobs" and ua == FLOOR_UA:
            t = _ts(ev["requestReceivedTimestamp"])
            out.first_submit = t if out.first_submit is None else min(out.first_submit, t)
    out.creates_t.sort()
    return out


ALL_RESOURCES = ("pods", "services", "tfjobs", "tfjobs/status", "events", "leases", "namespaces")


def codes(r: Requests, verb: str, res: str) -> str:
    ok, dup = r.count(verb, res, "201"), r.count(verb, res, "409")
    other = r.count(verb, res) - ok - dup
    return f"{ok} / {dup} / {other}"


def status_writes(r: Requests) -> int:
    return r.total(("update", "patch"), ("tfjobs/status",))


def release_writes(r: Requests) -> int:
    """Pod patches: the tracking finalizer coming off (reconcile.policy.tracking)."""
    return r.count("patch", "pods")


def other_writes(r: Requests) -> int:
    return r.total(
        ("update", "patch", "delete", "deletecollection"), ("pods", "services", "tfjobs")
    ) - release_writes(r)


def workload_writes(r: Requests) -> int:
    return (
        r.count("create", "pods")
        + r.count("create", "services")
        + status_writes(r)
        + other_writes(r)
    )
