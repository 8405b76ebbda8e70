"""The upstream conformance data, read in place: training-operator v1.9.0's TFJob CRD and
examples, from ``$TFJOB_CONFORMANCE_DIR`` or ``../shared/conformance`` beside the repo.

Missing data must never pass unnoticed: ``require`` fails the test in CI (``CI=true``)
and elsewhere skips it with a message naming the path looked at. Parametrized tests
take ``example_params()``, which stands one ``None`` in for the examples when there are
none, so each such test says the same rather than losing its cases silently.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NoReturn

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOT = (
    Path(os.environ.get("TFJOB_CONFORMANCE_DIR") or REPO.parent / "shared" / "conformance")
    / "training-operator-v1.9.0"
)
EXAMPLES_DIR = ROOT / "examples"
UPSTREAM_CRD = ROOT / "kubeflow.org_tfjobs.yaml"


def examples() -> list[Path]:
    return sorted(EXAMPLES_DIR.glob("*.yaml"))


def example_params() -> list[Any]:
    """pytest params of the examples (id: the file name), or one ``None`` naming the
    absence."""
    found = examples()
    if not found:
        return [pytest.param(None, id="conformance-data-missing")]
    return [pytest.param(p, id=p.name) for p in found]


def missing(what: Path) -> NoReturn:
    msg = f"conformance data missing: {what} (TFJOB_CONFORMANCE_DIR sets where it is)"
    if os.environ.get("CI") == "true":
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


def require(path: Path | None, what: Path = EXAMPLES_DIR) -> Path:
    """``path`` if it is there; otherwise the test fails in CI or skips, naming ``what``."""
    if path is None or not path.exists():
        missing(path or what)
    return path
