"""The stall and restart-guard annotations, read (reconcile.api.watch)."""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.api.names import (
    FIRST_PROGRESS_DEADLINE_ANNOTATION as FIRST,
)
from reconcile.api.names import (
    PROGRESS_DEADLINE_ANNOTATION as DEADLINE,
)
from reconcile.api.names import (
    RESTART_GUARD_ANNOTATION as GUARD,
)
from reconcile.api.names import (
    STALL_ACTION_ANNOTATION as ACTION,
)
from reconcile.api.names import STRAGGLER_ACTION_ANNOTATION as SACTION
from reconcile.api.names import STRAGGLER_THRESHOLD_ANNOTATION as THRESHOLD
from reconcile.api.spec import SpecCache
from reconcile.api.watch import (
    NO_WATCH,
    StallAction,
    StragglerAction,
    TrainingWatch,
    read_watch,
)
from tests.builders import make_tfjob


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        (None, NO_WATCH),
        ({}, TrainingWatch(restart_guard=3)),
        ({DEADLINE: "60"}, TrainingWatch(60, 180)),
        ({DEADLINE: " 60 "}, TrainingWatch(60, 180)),
        ({DEADLINE: "60", FIRST: "30"}, TrainingWatch(60, 30)),
        ({FIRST: "30"}, TrainingWatch(None, 30)),
        ({DEADLINE: "2592000"}, TrainingWatch(2592000, 2592000)),
        ({ACTION: "Restart"}, TrainingWatch(stall_action=StallAction.RESTART)),
        ({ACTION: "fail"}, TrainingWatch(stall_action=StallAction.FAIL)),
        ({GUARD: "0"}, TrainingWatch(restart_guard=0)),
        ({GUARD: "7"}, TrainingWatch(restart_guard=7)),
        ({THRESHOLD: "0.5"}, TrainingWatch(straggler_threshold=0.5)),
        ({THRESHOLD: ".9"}, TrainingWatch(straggler_threshold=0.9)),
        ({THRESHOLD: "0"}, TrainingWatch(straggler_threshold=0.0)),
        ({THRESHOLD: "1"}, TrainingWatch(straggler_threshold=1.0)),
        ({SACTION: "move"}, TrainingWatch(straggler_action=StragglerAction.MOVE)),
    ],
)
def test_settings(annotations: dict[str, str] | None, expected: TrainingWatch) -> None:
    meta: dict[str, Any] = {} if annotations is None else {"annotations": annotations}
    assert read_watch(meta) == (expected, [])


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (DEADLINE, "0", "must be a whole number from 1 to 2592000, not '0'"),
        (DEADLINE, "1.5", "must be a whole number from 1 to 2592000, not '1.5'"),
        (DEADLINE, "2592001", "must be a whole number from 1 to 2592000, not '2592001'"),
        (FIRST, "soon", "must be a whole number from 1 to 2592000, not 'soon'"),
        (GUARD, "-1", "must be a whole number from 0 to 1000, not '-1'"),
        (GUARD, "١٢", "must be a whole number from 0 to 1000, not '١٢'"),
        (ACTION, "reboot", "must be one of report, restart, fail, not 'reboot'"),
        (ACTION, 3, "must be one of report, restart, fail, not 3"),
        (THRESHOLD, "", "must be a decimal number from 0 to 1, not ''"),
        (THRESHOLD, "1.5", "must be a decimal number from 0 to 1, not '1.5'"),
        (THRESHOLD, "1e-1", "must be a decimal number from 0 to 1, not '1e-1'"),
        (THRESHOLD, "nan", "must be a decimal number from 0 to 1, not 'nan'"),
        (THRESHOLD, "-0.5", "must be a decimal number from 0 to 1, not '-0.5'"),
        (SACTION, "evict", "must be one of report, move, not 'evict'"),
    ],
)
def test_bad_values_are_named(key: str, value: object, message: str) -> None:
    watch, errors = read_watch({"annotations": {key: value}})
    assert errors == [(key, message)]
    assert watch == read_watch({"annotations": {}})[0]  # left at its default


def test_an_annotation_edit_alone_is_seen_through_the_spec_cache() -> None:
    cache = SpecCache()
    job = make_tfjob("m").worker(1).obj()
    assert cache.read("ns/m", job).watch.progress_deadline is None
    edited = {**job, "metadata": {**job["metadata"], "annotations": {DEADLINE: "60"}}}
    assert cache.read("ns/m", edited).watch.progress_deadline == 60
    # and the model the planner reads carries the new annotations too
    assert cache.read("ns/m", edited).tfjob.metadata["annotations"] == {DEADLINE: "60"}  # type: ignore[union-attr]
    again = {**edited, "metadata": {**edited["metadata"], "labels": {"team": "a"}}}
    assert cache.read("ns/m", again).tfjob.metadata["labels"] == {"team": "a"}  # type: ignore[union-attr]


def test_a_huge_number_is_an_error_not_a_crash() -> None:
    _, errors = read_watch({"annotations": {DEADLINE: "9" * 5000}})
    assert [k for k, _ in errors] == [DEADLINE]
