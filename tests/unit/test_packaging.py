"""The image installs exactly the locked dependencies: the lock covers every runtime
dependency of pyproject.toml at a version it allows, each with hashes."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "config" / "manager" / "requirements.lock"
BUILD_LOCK = REPO / "config" / "manager" / "build-requirements.lock"


def _locked(lock: Path = LOCK) -> dict[str, tuple[str, list[str]]]:
    out: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=\S)", lock.read_text()):
        head = re.match(r"([A-Za-z0-9_.\-\[\]]+)==(\S+)", block)
        if head:
            name = canonicalize_name(head.group(1).split("[")[0])
            out[name] = (head.group(2), re.findall(r"--hash=sha256:([0-9a-f]{64})", block))
    return out


def test_every_runtime_dependency_is_locked_with_hashes() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    locked = _locked()
    for spec in project["dependencies"]:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        assert name in locked, f"{name} is not in {LOCK.name}: run make lock"
        version = locked[name][0]
        assert req.specifier.contains(version), f"{name}=={version} vs {spec}: run make lock"
    assert all(hashes for _, hashes in locked.values()), "every pin carries its hashes"


def test_the_build_backend_is_locked_with_hashes() -> None:
    build = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]
    locked = _locked(BUILD_LOCK)
    for spec in build["requires"]:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        assert name in locked, f"{name} is not in {BUILD_LOCK.name}: run make lock"
        assert req.specifier.contains(locked[name][0]), f"{name}: run make lock"
    assert all(hashes for _, hashes in locked.values()), "every pin carries its hashes"


def test_the_dockerfile_pins_its_base_and_installs_only_from_the_locks() -> None:
    dockerfile = (REPO / "config" / "manager" / "Dockerfile").read_text()
    assert re.search(r"ARG BASE=\S+@sha256:[0-9a-f]{64}", dockerfile)
    assert "--require-hashes -r /tmp/requirements.lock" in dockerfile
    assert "--require-hashes -r /tmp/build-requirements.lock" in dockerfile
    # The project's own wheel is built without fetching a backend and adds no dependency.
    assert "--no-build-isolation --no-deps" in dockerfile
    assert "--no-deps /wheels/" in dockerfile
