"""Stragglers: replicas slower than their peers doing the same work (pure).

In synchronous training (MultiWorkerMirroredStrategy) the all-reduce makes every worker
take a step as slowly as the slowest, so step rates say nothing about who is slow: the
replicas time the parts of a step that exclude the collective waits themselves
(``sections``: data loading, the forward and backward pass; the helper's StepTimer),
and a replica is compared on those. Where no sections are reported, replicas that step
on their own (workers of asynchronous parameter-server training) are compared on their
step rates. Peers are the replicas of the same type.

A replica's measure is the median over its recent reports (the record's window: at most
8 reports, 120 s) after its pod's first (the warm-up: the first steps build and compile
the graph: a new pod scored on them would be flagged for its start), and only
once it has MIN_SAMPLES of them; its score is its speed as
a fraction of its peers' reference (for a section: the reference seconds over its own;
for a rate: its own over the reference), the lowest over its sections.

The reference is one no single replica can drag: the peers' median, and with an even
number of peers the slower of the middle two (the higher seconds, the lower rate), so
against two peers one of them lying fast leaves the honest one as the reference; and
figures no real step shows (a section at or below SECTION_FLOOR, a rate at or below 0)
are neither scored nor part of anyone's reference.

Below the threshold (0.75 by default, as NVIDIA's resiliency extension flags) it is
flagged; a flagged replica clears once its score is back above the threshold plus
RECOVER_MARGIN (hysteresis: a replica near the line does not flap), or when its pod is
gone (a replacement starts afresh). Flags live in ``trainingProgress.stragglers`` with
the time each episode began, so a new leader neither forgets them nor announces them
again: one event per episode.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from reconcile.api.status_types import Straggler, stored_now
from reconcile.policy import conditions as cond
from reconcile.progress.records import RATE_WINDOW_SECONDS, ReplicaRecord

#: reports a replica needs in its window before it is scored: at the helper's 5 s
#: interval, a quarter of a minute of one behaviour, not one slow step
MIN_SAMPLES = 3
#: a flagged replica clears at threshold + this (at most 1)
RECOVER_MARGIN = 0.1
#: the status lists at most this many, slowest first
MAX_LISTED = 16
#: seconds: a self-timed part of a real step takes longer (a report of 0 is no figure)
SECTION_FLOOR = 1e-4
RATE_BASIS = "stepRate"
SECTION_BASIS = "section:"


@dataclass(frozen=True, slots=True)
class Score:
    score: float
    basis: str
    #: how many peers it was compared with
    peers: int


def scores(live: Iterable[ReplicaRecord]) -> dict[tuple[str, int], Score]:
    """Each scored replica's score, by (replica type, index)."""
    by_type: dict[str, list[ReplicaRecord]] = {}
    for r in live:
        by_type.setdefault(r.who.replica_type, []).append(r)
    out: dict[tuple[str, int], Score] = {}
    for records in by_type.values():
        found = _by_sections(records) or _by_rates(records)
        out.update(found)
    return out


def _by_sections(records: Sequence[ReplicaRecord]) -> dict[tuple[str, int], Score]:
    medians = {
        _slot(r): kept
        for r in records
        if (kept := {n: v for n, v in _section_medians(r).items() if v > SECTION_FLOOR})
    }
    if len(medians) < 2:
        return {}
    by_name: dict[str, list[float]] = {}
    for m in medians.values():
        for name, value in m.items():
            by_name.setdefault(name, []).append(value)
    for values in by_name.values():
        values.sort()
    out: dict[tuple[str, int], Score] = {}
    for slot, mine in medians.items():
        best: Score | None = None
        for name, own in mine.items():
            ref = _peers_median(by_name[name], own, slower="high")
            if ref is None or ref <= 0:
                continue
            found = Score(ref / own, SECTION_BASIS + name, len(by_name[name]) - 1)
            if best is None or found.score < best.score:
                best = found
        if best is not None:
            out[slot] = best
    return out


def _by_rates(records: Sequence[ReplicaRecord]) -> dict[tuple[str, int], Score]:
    rates = {_slot(r): rate for r in records if (rate := _settled_rate(r)) is not None}
    # a replica that does not step is scored (it is the slowest), but is no reference
    ordered = sorted(rate for rate in rates.values() if rate > 0)
    out: dict[tuple[str, int], Score] = {}
    for slot, own in rates.items():
        if own > 0:
            ref, peers = _peers_median(ordered, own, slower="low"), len(ordered) - 1
        else:
            ref, peers = _median(ordered, slower="low"), len(ordered)
        if ref is not None and ref > 0:
            out[slot] = Score(max(0.0, own) / ref, RATE_BASIS, peers)
    return out


def _peers_median(ordered: Sequence[float], own: float, *, slower: str) -> float | None:
    """The median of ``ordered`` (sorted, holding ``own``) without one ``own``: the
    peers' median in O(log n), so a 1,000-replica job is not scored in O(n²). With an
    even number of peers, the slower of the middle two: the ``high`` one for seconds,
    the ``low`` one for rates."""
    n = len(ordered) - 1  # the peers
    if n < 1:
        return None
    k = bisect.bisect_left(ordered, own)  # the one left out

    def peer(i: int) -> float:
        return ordered[i if i < k else i + 1]

    if n % 2:
        return peer(n // 2)
    return peer(n // 2) if slower == "high" else peer(n // 2 - 1)


def _median(ordered: Sequence[float], *, slower: str) -> float | None:
    """The median of ``ordered`` (sorted), the slower middle one when there are two."""
    n = len(ordered)
    if n < 1:
        return None
    if n % 2:
        return ordered[n // 2]
    return ordered[n // 2] if slower == "high" else ordered[n // 2 - 1]


def _settled_rate(r: ReplicaRecord) -> float | None:
    """Steps a second over the window's reports after the warm-up (the record's first
    report, whose steps build the graph), once there are MIN_SAMPLES of them."""
    if not r.samples:
        return None
    last_t, last_step = r.samples[-1]
    usable = [x for x in r.samples if x[0] > r.first and last_t - x[0] <= RATE_WINDOW_SECONDS]
    if len(usable) < MIN_SAMPLES:
        return None
    first_t, first_step = usable[0]
    return (last_step - first_step) / (last_t - first_t) if last_t > first_t else None


def _section_medians(r: ReplicaRecord) -> dict[str, float]:
    if not r.sections:
        return {}
    last = r.sections[-1][0]
    recent = [s for t, s in r.sections if t > r.first and last - t <= RATE_WINDOW_SECONDS]
    if len(recent) < MIN_SAMPLES:
        return {}
    names = {n for s in recent for n in s}
    out = {}
    for name in names:
        values = [s[name] for s in recent if name in s]
        if len(values) >= MIN_SAMPLES:
            out[name] = statistics.median(values)
    return out


def find_stragglers(
    live: Sequence[ReplicaRecord],
    stored: Sequence[Straggler],
    threshold: float,
    now: datetime,
) -> list[Straggler]:
    """The replicas flagged now, given those flagged before (``stored``)."""
    if threshold <= 0:
        return []
    by_slot = {_slot(r): r for r in live}
    before = {(s.replica_type, s.index): s for s in stored}
    recover = min(1.0, threshold + RECOVER_MARGIN)
    out: list[Straggler] = []
    scored = scores(live)
    for slot, found in scored.items():
        r = by_slot[slot]
        prev = before.get(slot)
        if prev is not None and prev.pod_uid != r.who.pod_uid:
            prev = None  # a new pod of the index: a new start
        if found.score < threshold or (prev is not None and found.score < recover):
            since = prev.since if prev is not None else stored_now(now)
            out.append(_straggler(r, found, since))
    for slot, prev in before.items():
        held = by_slot.get(slot)
        # not scored this time (too few recent reports): kept while its pod lives
        if slot not in scored and held is not None and held.who.pod_uid == prev.pod_uid:
            out.append(prev)
    out.sort(key=lambda s: (s.score, s.replica_type, s.index))
    return out[:MAX_LISTED]


def straggler_events(
    name: str, before: Sequence[Straggler], now: Sequence[Straggler], threshold: float
) -> list[cond.EventIntent]:
    """A Warning for each replica newly flagged, a Normal one for each cleared: one of
    each per episode, as the stored list says what was announced."""
    was = {(s.replica_type, s.index, s.pod_uid) for s in before}
    is_ = {(s.replica_type, s.index, s.pod_uid) for s in now}
    out = [
        cond.EventIntent(
            cond.WARNING,
            cond.REASON_STRAGGLER,
            f"TFJob {name}: {_who(s)} on node {s.node or '(unknown)'} runs at {s.score:.2f}"
            f" of its peers' speed ({_basis(s.basis)}), below the threshold {threshold:g}.",
        )
        for s in now
        if (s.replica_type, s.index, s.pod_uid) not in was
    ]
    out += [
        cond.EventIntent(
            cond.NORMAL,
            cond.REASON_STRAGGLER_RECOVERED,
            f"TFJob {name}: {_who(s)} on node {s.node or '(unknown)'} is no longer a straggler.",
        )
        for s in before
        if (s.replica_type, s.index, s.pod_uid) not in is_
    ]
    return out


def _who(s: Straggler) -> str:
    return f"{s.replica_type.lower()}-{s.index} (pod {s.pod})"


def _basis(basis: str) -> str:
    if basis.startswith(SECTION_BASIS):
        return f"its self-timed section {basis[len(SECTION_BASIS) :]!r}"
    return "its step rate"


def _straggler(r: ReplicaRecord, found: Score, since: datetime | None) -> Straggler:
    return Straggler(
        replica_type=r.who.replica_type,
        index=r.who.index,
        pod=r.who.pod_name,
        pod_uid=r.who.pod_uid,
        node=r.who.node,
        score=round(found.score, 2),
        basis=found.basis,
        peers=found.peers,
        since=since,
    )


def _slot(r: ReplicaRecord) -> tuple[str, int]:
    return r.who.replica_type, r.who.index
