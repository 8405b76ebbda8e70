"""hack/tf_requirements.py and the file it writes: the TensorFlow image installs exactly
the pinned wheels, each with its hash; tensorflow-cpu stands in for the tensorflow that
tf_keras requires; the committed file is what `lock` writes (no hand edits)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from hack import tf_requirements as tfr
from hack.tf_requirements import Pin


def _item(name: str, version: str, sha: str | None) -> dict[str, Any]:
    info: dict[str, Any] = {"url": f"https://files.example/{name}-{version}-py3-none-any.whl"}
    if sha:
        info["archive_info"] = {"hashes": {"sha256": sha}}
    return {"metadata": {"name": name, "version": version}, "download_info": info}


def test_a_pip_report_becomes_sorted_normalized_pins_without_the_provided_package() -> None:
    report = {
        "install": [
            _item("tensorflow_cpu", "2.21.0", "a" * 64),
            _item("tf_keras", "2.21.0", "b" * 64),
            _item("tensorflow", "2.21.0", "c" * 64),
            _item("Absl.Py", "2.5.1", "d" * 64),
        ]
    }
    assert tfr.pins_from_report(report) == [
        Pin("absl-py", "2.5.1", "d" * 64),
        Pin("tensorflow-cpu", "2.21.0", "a" * 64),
        Pin("tf-keras", "2.21.0", "b" * 64),
    ]


def test_a_report_without_the_provider_or_a_hash_is_refused() -> None:
    with pytest.raises(ValueError, match="tensorflow is left out for tensorflow-cpu"):
        tfr.pins_from_report({"install": [_item("tensorflow", "2.21.0", "c" * 64)]})
    with pytest.raises(ValueError, match="no sha256"):
        tfr.pins_from_report({"install": [_item("six", "1.17.0", None)]})


def test_the_file_reads_back_as_written_and_refuses_an_unhashed_line() -> None:
    pins = [Pin("absl-py", "2.5.1", "d" * 64), Pin("tf-keras", "2.21.0", "b" * 64)]
    text = tfr.render(pins)
    assert "python -m hack.tf_requirements lock" in text
    assert tfr.parse(text) == pins
    with pytest.raises(ValueError, match="not a pinned, hashed requirement"):
        tfr.parse(text + "six==1.17.0\n")


def test_the_committed_requirements_are_what_lock_writes() -> None:
    text = tfr.REQUIREMENTS.read_text()
    pins = tfr.parse(text)
    assert tfr.render(pins) == text, "edited by hand? run python -m hack.tf_requirements lock"
    names = [p.name for p in pins]
    assert len(names) == len(set(names))
    versions = {p.name: p.version for p in pins}
    assert versions["tensorflow-cpu"] == versions["tf-keras"] == tfr.VERSION
    assert "tensorflow" not in versions, "tensorflow-cpu provides it; the wheel is 572 MB more"
    assert {"keras", "numpy", "protobuf", "grpcio", "h5py", "ml-dtypes"} <= set(names)


def test_fetch_asks_nothing_of_the_index_when_every_wheel_is_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    contents = {"six": b"six wheel", "idna": b"idna wheel"}
    pins = [Pin(n, "1", hashlib.sha256(c).hexdigest()) for n, c in contents.items()]
    requirements = tmp_path / "req.txt"
    requirements.write_text(tfr.render(pins))
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(tfr, "pip", lambda *args: calls.append(args))

    (wheels / "six-1-py3-none-any.whl").write_bytes(contents["six"])
    assert tfr.missing(wheels, pins) == [pins[1]]
    tfr.fetch(wheels, requirements)
    assert len(calls) == 1 and "--require-hashes" in calls[0]

    (wheels / "renamed.whl").write_bytes(contents["idna"])  # by hash, whatever its name
    tfr.fetch(wheels, requirements)
    assert len(calls) == 1


def test_the_image_is_named_for_the_version_pinned() -> None:
    script = (tfr.HERE / "build-tf-image.sh").read_text()
    assert f"\nTF_VERSION={tfr.VERSION}\n" in script
