"""A controller invocation checked as the controller's start would check it."""

from __future__ import annotations

import shlex

import pytest

from tfjob_controller.app import parse_args


def check_invocation(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """``argv`` (without the program) passes the parser and its start-up checks; else
    fails with the parser's own words."""
    try:
        parse_args(argv)
    except SystemExit as e:
        err = capsys.readouterr().err
        raise AssertionError(f"tfjob-controller {shlex.join(argv)}:\n{err}") from e


def check_refused(argv: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``argv`` is refused as a usage error (exit 2) whose message says ``words``."""
    with pytest.raises(SystemExit) as exit_:
        parse_args(argv)
    assert exit_.value.code == 2
    assert words in capsys.readouterr().err
