"""The controller's training-progress flags: checked together, and harmless when off."""

from __future__ import annotations

import tempfile

import pytest

from tests.invocations import check_refused
from tfjob_controller.app import parse_args
from tfjob_controller.reporting import reporting_of


def test_off_by_default_and_no_temporary_directory_looked_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the Deployment's read-only root filesystem has no temporary directory: parsing
    # the flags must not ask for one (the image test caught it)
    def none() -> str:
        raise FileNotFoundError("No usable temporary directory found")

    monkeypatch.setattr(tempfile, "gettempdir", none)
    args = parse_args([])
    assert reporting_of(args) is None and args.progress_cert_dir == ""


def test_the_url_with_a_made_or_given_certificate() -> None:
    made = parse_args(["--progress-url", "https://ctl.kubeflow.svc:10443"])
    assert reporting_of(made) is not None and made.progress_cert_secret
    given = parse_args(
        [
            "--progress-url=https://ctl:10443",
            "--progress-cert-file=c",
            "--progress-key-file=k",
            "--progress-ca-file=ca",
        ]
    )
    assert given.progress_cert_file == "c"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--progress-url=http://ctl:10443"], "https://"),
        (["--progress-url=https://ctl", "--progress-cert-file=c"], "needs --progress-key-file"),
        (["--progress-url=https://ctl", "--progress-token-seconds=60"], "at least 600"),
        (
            [
                "--progress-url=https://ctl",
                "--progress-cert-secret=s",
                "--progress-stranger-connections=-1",
            ],
            "must be 0 (no limit) or more",
        ),
        (
            [
                "--progress-url=https://ctl",
                "--progress-cert-secret=s",
                "--progress-stranger-connections=nan",
            ],
            "must be 0 (no limit) or more",
        ),
    ],
)
def test_flags_that_cannot_work_together_are_refused(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    check_refused(argv, words, capsys)
