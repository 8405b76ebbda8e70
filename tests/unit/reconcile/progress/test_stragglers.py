"""Stragglers, pure (reconcile.progress.stragglers): who is scored on what, the window,
the threshold and its hysteresis, and one event per episode."""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

from reconcile.api.status_types import Straggler
from reconcile.progress.records import ReplicaRecord, Reporter, record
from reconcile.progress.stragglers import (
    _peers_median,
    find_stragglers,
    scores,
    straggler_events,
)
from reconcile.progress.wire import Report
from tests.builders import at


def worker(
    index: int,
    *,
    compute: Sequence[float] = (),
    rate: float | None = None,
    uid: str | None = None,
    start: float = 0,
    rtype: str = "Worker",
) -> ReplicaRecord:
    """Reports every 5 s: each timing ``compute`` seconds in turn, or stepping at ``rate``."""
    who = Reporter(rtype, index, f"j-{rtype.lower()}-{index}", uid or f"u{index}", f"node-{index}")
    n = len(compute) if compute else 5
    rec = None
    for i in range(n):
        step = int(i * 5 * rate) if rate is not None else i
        sections = {"compute": compute[i]} if compute else {}
        rec = record(rec, who, Report(step=step, sections=sections), at(start + 5 * i))
    assert rec is not None
    return rec


def flagged(
    records: Sequence[ReplicaRecord], stored: Sequence[Straggler] = (), t: float = 100
) -> list[tuple[int, float, str]]:
    return [(s.index, s.score, s.basis) for s in find_stragglers(records, stored, 0.75, at(t))]


def test_synchronous_workers_are_compared_on_their_sections_not_their_rates() -> None:
    fast = [worker(i, compute=[0.10, 0.11, 0.10, 0.10]) for i in range(3)]
    slow = worker(3, compute=[0.20, 0.21, 0.19, 0.20])
    assert flagged([*fast, slow]) == [(3, 0.5, "section:compute")]
    # without sections their rates are all the same (the all-reduce): nobody
    same = [worker(i, rate=10) for i in range(4)]
    assert flagged(same) == []


def test_parameter_server_workers_are_compared_on_their_step_rates() -> None:
    rs = [worker(0, rate=10), worker(1, rate=10), worker(2, rate=3)]
    assert flagged(rs) == [(2, 0.3, "stepRate")]
    # a type is compared only with itself: a slow chief has no peer
    assert flagged([worker(0, rate=10), worker(0, rate=1, rtype="Chief", uid="c")]) == []


def test_too_few_reports_or_no_peer_scores_nobody() -> None:
    assert scores([worker(0, compute=[0.1, 0.1]), worker(1, compute=[0.9, 0.9])]) == {}
    assert scores([worker(0, compute=[0.1, 0.1, 0.1])]) == {}
    assert scores([worker(0, rate=10)]) == {}


def test_a_median_ignores_one_odd_step() -> None:
    a = worker(0, compute=[0.1, 0.1, 0.9, 0.1])  # one slow step (a checkpoint save)
    b = worker(1, compute=[0.1, 0.1, 0.1, 0.1])
    assert flagged([a, b]) == []


def test_hysteresis_and_the_episode_since() -> None:
    peers = [worker(i, rate=10) for i in range(2)]
    first = find_stragglers([*peers, worker(2, rate=7.0)], (), 0.75, at(100))
    assert [(s.index, s.score, s.since) for s in first] == [(2, 0.7, at(100))]
    # back to 0.8: above the threshold, not above 0.85: still flagged, same episode
    again = find_stragglers([*peers, worker(2, rate=8.0)], first, 0.75, at(200))
    assert [(s.index, s.score, s.since) for s in again] == [(2, 0.8, at(100))]
    # at 0.9 it has recovered
    assert find_stragglers([*peers, worker(2, rate=9.0)], again, 0.75, at(300)) == []
    # not flagged before, 0.8 is not flagged now
    assert find_stragglers([*peers, worker(2, rate=8.0)], (), 0.75, at(300)) == []


def test_a_flag_is_kept_while_unscored_and_dropped_with_its_pod() -> None:
    peers = [worker(i, rate=10) for i in range(2)]
    first = find_stragglers([*peers, worker(2, rate=3)], (), 0.75, at(100))
    quiet = record(None, first_reporter(first[0]), Report(step=1), at(200))  # one report: unscored
    assert find_stragglers([*peers, quiet], first, 0.75, at(200)) == first
    replaced = worker(2, rate=3, uid="new")  # the next pod of the index, also slow
    again = find_stragglers([*peers, replaced], first, 0.75, at(300))
    assert [(s.pod_uid, s.since) for s in again] == [("new", at(300))]  # a new episode
    # its pod gone altogether
    assert find_stragglers(peers, first, 0.75, at(300)) == []


def first_reporter(s: Straggler) -> Reporter:
    return Reporter(s.replica_type, s.index, s.pod, s.pod_uid, s.node)


def test_off_and_capped() -> None:
    slow = [worker(0, rate=10), worker(1, rate=10), worker(2, rate=1)]
    assert find_stragglers(slow, (), 0.0, at(100)) == []
    many = [worker(i, rate=10) for i in range(20)] + [
        worker(100 + i, rate=1 + i / 10) for i in range(20)
    ]
    found = find_stragglers(many, (), 0.75, at(100))
    assert len(found) == 16 and found[0].index == 100  # slowest first


def test_one_event_each_way_per_episode() -> None:
    peers = [worker(i, rate=10) for i in range(2)]
    first = find_stragglers([*peers, worker(2, rate=3)], (), 0.75, at(100))
    (warn,) = straggler_events("j", (), first, 0.75)
    assert (warn.type, warn.reason) == ("Warning", "StragglerDetected")
    assert warn.message == (
        "TFJob j: worker-2 (pod j-worker-2) on node node-2 runs at 0.30 of its peers'"
        " speed (its step rate), below the threshold 0.75."
    )
    assert straggler_events("j", first, first, 0.75) == []  # the same episode
    (ok,) = straggler_events("j", first, [], 0.75)
    assert (ok.type, ok.reason) == ("Normal", "StragglerRecovered")
    assert "worker-2 (pod j-worker-2) on node node-2 is no longer a straggler" in ok.message


def test_the_peers_median_leaves_one_out() -> None:
    rng = random.Random(7)
    for n in range(1, 30):
        values = sorted(rng.choice([1.0, 2.0, 3.0, rng.random()]) for _ in range(n))
        for own in values:
            peers = list(values)
            peers.remove(own)
            assert _peers_median(values, own, slower="high") == (
                statistics.median_high(peers) if peers else None
            )
            assert _peers_median(values, own, slower="low") == (
                statistics.median_low(peers) if peers else None
            )
    # a thousand replicas, each against the 999 others
    many = [worker(i, rate=10 + (i % 7)) for i in range(1000)]
    found = find_stragglers([*many, worker(1000, rate=2)], (), 0.75, at(100))
    assert [s.index for s in found] == [1000]


def test_a_pods_first_report_is_its_warm_up_and_not_scored() -> None:
    def steps(index: int, values: list[int]) -> ReplicaRecord:
        who = Reporter("Worker", index, f"j-worker-{index}", f"u{index}", "n")
        rec = None
        for i, step in enumerate(values):
            rec = record(rec, who, Report(step=step), at(5 * i))
        assert rec is not None
        return rec

    peers = [steps(i, [0, 50, 100, 150]) for i in range(2)]
    # its first interval built the graph (1 step in 5 s), then it kept pace
    started_slowly = steps(2, [0, 1, 51, 101])
    assert flagged([*peers, started_slowly]) == []


def test_one_replica_lying_fast_never_gets_an_honest_peer_flagged() -> None:
    honest = [worker(i, compute=[0.08] * 4) for i in (1, 2)]
    for lie in (0.0, 1e-9, 0.001, 0.02):  # nothing, below the floor, then merely fast
        liar = worker(0, compute=[lie] * 4)
        assert flagged([liar, *honest]) == [], lie
    # on rates: an inflated rate (or a negative one) is no reference either
    for lie in (1e12, 1e6, -5.0):
        rs = [worker(0, rate=lie), worker(1, rate=10), worker(2, rate=10)]
        assert [i for i, _, _ in flagged(rs)] in ([], [0]), lie
    # and a real straggler among them is still found, liar or not
    slow = worker(3, compute=[0.2] * 4)
    assert [i for i, _, _ in flagged([worker(0, compute=[0.0] * 4), *honest, slow])] == [3]


def test_a_replica_that_does_not_step_is_scored_against_those_that_do() -> None:
    rs = [worker(0, rate=0), worker(1, rate=10), worker(2, rate=10)]
    assert flagged(rs) == [(0, 0.0, "stepRate")]


def test_figures_no_real_step_shows_are_no_ones_reference() -> None:
    # two liars below the floor would otherwise be the honest pair's middle peers
    honest = [worker(i, compute=[0.08] * 4) for i in (2, 3)]
    liars = [worker(i, compute=[1e-9] * 4) for i in (0, 1)]
    assert flagged([*liars, *honest]) == []
    # two replicas that do not step: the one that is slow is still measured on the others
    rs = [worker(0, rate=0), worker(1, rate=0), worker(2, rate=5)]
    rs += [worker(3, rate=10), worker(4, rate=10)]
    assert [i for i, _, _ in flagged(rs)] == [0, 1, 2]
