"""The report document, read strictly: every refusal names its field."""

from __future__ import annotations

import orjson
import pytest

from reconcile.progress.wire import MAX_BODY_BYTES, MAX_INT, Report, ReportError, parse_report


def doc(**fields: object) -> bytes:
    return orjson.dumps({"step": 10, **fields})


def test_a_full_report() -> None:
    body = doc(
        totalSteps=100,
        epoch=1,
        totalEpochs=4,
        metrics={"loss": 0.5, "val/acc": 1},
        sections={"data": 0.01, "compute": 0},
        final=True,
    )
    assert parse_report(body) == Report(
        step=10,
        total_steps=100,
        epoch=1,
        total_epochs=4,
        metrics={"loss": 0.5, "val/acc": 1.0},
        sections={"data": 0.01, "compute": 0.0},
        final=True,
    )


def test_the_least_report_and_nulls() -> None:
    assert parse_report(b'{"step": 0}') == Report(step=0)
    assert parse_report(doc(totalSteps=None, metrics=None)) == Report(step=10)


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (b"", "", "not JSON"),
        (b"[1]", "", "must be a JSON object, not an array"),
        (b'{"step": 1, "step2": 3}', "step2", "unknown field"),
        (b'{"epoch": 1}', "step", "required"),
        (b'{"step": "1"}', "step", "must be an integer, not a string"),
        (b'{"step": true}', "step", "must be an integer, not a boolean"),
        (b'{"step": 1.5}', "step", "must be an integer, not a number"),
        (b'{"step": -1}', "step", "between 0"),
        (orjson.dumps({"step": MAX_INT + 1}), "step", "between 0"),
        (doc(totalSteps=0), "totalSteps", "between 1"),
        (doc(final="yes"), "final", "must be a boolean"),
        (doc(metrics=[1]), "metrics", "must be an object"),
        (doc(metrics={f"m{i}": 1 for i in range(17)}), "metrics", "at most 16"),
        (doc(metrics={"1loss": 1}), "metrics.1loss", "name must match"),
        (doc(metrics={"loss": "low"}), "metrics.loss", "must be a number, not a string"),
        (doc(metrics={"loss": None}), "metrics.loss", "must be a number, not null"),
        (b'{"step": 1, "metrics": {"loss": 1e999}}', "", "infinity"),
        (doc(sections={"data": -0.5}), "sections.data", "at least 0"),
        (doc(sections={f"s{i}": 1 for i in range(9)}), "sections", "at most 8"),
    ],
)
def test_refusals_name_the_field(body: bytes, field: str, words: str) -> None:
    with pytest.raises(ReportError) as e:
        parse_report(body)
    assert e.value.field == field
    assert words in str(e.value)


def test_a_body_over_the_limit_is_refused_unparsed() -> None:
    big = b'{"step": 1, "metrics": {}}' + b" " * MAX_BODY_BYTES
    with pytest.raises(ReportError, match="over"):
        parse_report(big)
