"""The TensorFlow image's packages (hack/node/tf-requirements.txt): pinned, hashed, fetched.

The image's Python is Debian bookworm's CPython 3.11, not this machine's, so pip is told
the target (``PLATFORM_ARGS``) and takes wheels only. Three steps, each a subcommand:

    python -m hack.tf_requirements lock            # resolve again, rewrite the file
    python -m hack.tf_requirements fetch WHEELS    # download the pinned wheels (hashes checked)
    python -m hack.tf_requirements install WHEELS TARGET   # unpack them into TARGET

``lock`` resolves ``TOP`` with ``pip install --dry-run --report`` (pip reads the wheels'
metadata, not the wheels) and writes every package of the answer with its version and
the index's sha256 of the wheel pip chose. ``fetch`` then downloads exactly those files
with ``--require-hashes``, so a hash that does not match the real file fails there.
``install`` works from the downloaded wheels alone (``--no-index``): no network.

``tensorflow`` is left out of the file although tf_keras requires it: tensorflow-cpu
ships the same ``tensorflow`` import package at the same version, and the ``tensorflow``
wheel (572 MB, with the CUDA kernels) would only unpack over it. Packages are installed
with ``--no-deps`` from the file, so that one unmet requirement is never looked at.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "node" / "tf-requirements.txt"
VERSION = "2.21.0"
TOP = (f"tensorflow-cpu=={VERSION}", f"tf_keras=={VERSION}")
#: required by a package in TOP, but its import package comes with another one of them
PROVIDED_BY = {"tensorflow": "tensorflow-cpu"}
#: the image's interpreter: CPython 3.11 on glibc 2.36 (bookworm), x86_64
PLATFORM_ARGS = (
    "--only-binary=:all:",
    "--platform=manylinux_2_27_x86_64",
    "--platform=manylinux2014_x86_64",
    "--platform=manylinux_2_17_x86_64",
    "--python-version=3.11",
    "--implementation=cp",
    "--abi=cp311",
)
HEADER = f"""\
# The TensorFlow image's packages (hack/build-tf-image.sh), for CPython 3.11 on
# manylinux x86_64: {" and ".join(TOP)} with every dependency, each
# with the sha256 of the one wheel pip picks. Generated: python -m hack.tf_requirements lock
# (tensorflow, which tf_keras requires, is left out: tensorflow-cpu provides it).
"""


@dataclass(frozen=True, order=True)
class Pin:
    name: str  # normalized (PEP 503)
    version: str
    sha256: str


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins_from_report(report: dict[str, Any]) -> list[Pin]:
    """The packages of a ``pip install --report`` answer, less those PROVIDED_BY another."""
    resolved = {normalize(item["metadata"]["name"]) for item in report["install"]}
    pins = []
    for item in report["install"]:
        name = normalize(item["metadata"]["name"])
        if name in PROVIDED_BY:
            if PROVIDED_BY[name] not in resolved:
                raise ValueError(
                    f"{name} is left out for {PROVIDED_BY[name]}, which is not resolved"
                )
            continue
        hashes = item["download_info"].get("archive_info", {}).get("hashes", {})
        if "sha256" not in hashes:
            raise ValueError(f"{name}: the index gave no sha256 for {item['download_info']['url']}")
        pins.append(Pin(name, item["metadata"]["version"], hashes["sha256"]))
    return sorted(pins)


def render(pins: list[Pin]) -> str:
    lines = [f"{p.name}=={p.version} \\\n    --hash=sha256:{p.sha256}\n" for p in pins]
    return HEADER + "".join(lines)


_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)\s+--hash=sha256:([0-9a-f]{64})$")


def parse(text: str) -> list[Pin]:
    """The pins of a requirements file as render() writes it (continuations joined)."""
    pins = []
    for line in text.replace("\\\n", " ").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = _PIN.match(re.sub(r"\s+", " ", line))
        if m is None:
            raise ValueError(f"not a pinned, hashed requirement: {line!r}")
        pins.append(Pin(normalize(m[1]), m[2], m[3]))
    return pins


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def lock(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        report, target = Path(tmp, "report.json"), Path(tmp, "target")
        # --target: an empty directory, so nothing installed here counts as satisfied.
        flags = ["--dry-run", "--quiet", "--ignore-installed", f"--report={report}"]
        pip("install", *flags, f"--target={target}", *PLATFORM_ARGS, *TOP)
        pins = pins_from_report(json.loads(report.read_text()))
    out.write_text(render(pins))
    print(f"{out}: {len(pins)} packages")


def missing(wheels: Path, pins: list[Pin]) -> list[Pin]:
    """The pins none of whose wheels is in the directory (by hash, whatever its name)."""
    have = set()
    for wheel in wheels.glob("*.whl"):
        with wheel.open("rb") as f:
            have.add(hashlib.file_digest(f, "sha256").hexdigest())
    return [p for p in pins if p.sha256 not in have]


def fetch(wheels: Path, requirements: Path) -> None:
    """Downloads the wheels not there yet (pip checks every hash); with all of them
    there, asks nothing of the index, so a rebuild works offline."""
    todo = missing(wheels, parse(requirements.read_text())) if wheels.is_dir() else None
    if todo == []:
        print(f"{wheels}: every wheel there")
        return
    flags = ["--quiet", "--no-deps", "--require-hashes", *PLATFORM_ARGS]
    pip("download", *flags, f"--dest={wheels}", f"--requirement={requirements}")


def install(wheels: Path, target: Path, requirements: Path) -> None:
    # --no-compile: pip's .pyc files carry install-time stamps; build-tf-image.sh compiles
    # them afterwards, reproducibly. The console scripts pip writes to TARGET/bin name
    # this machine's interpreter, so the caller removes them.
    flags = ["--quiet", "--no-deps", "--require-hashes", "--no-index", "--no-compile"]
    flags += [f"--find-links={wheels}", f"--target={target}", *PLATFORM_ARGS]
    pip("install", *flags, f"--requirement={requirements}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--requirements", type=Path, default=REQUIREMENTS)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("lock", help="resolve TOP again and rewrite the requirements file")
    f = sub.add_parser("fetch", help="download the pinned wheels into WHEELS")
    f.add_argument("wheels", type=Path)
    i = sub.add_parser("install", help="install the wheels from WHEELS into TARGET")
    i.add_argument("wheels", type=Path)
    i.add_argument("target", type=Path)
    args = p.parse_args(argv)
    os.environ.pop("PIP_FIND_LINKS", None)  # only the index and WHEELS, never a local pile
    if args.cmd == "lock":
        lock(args.requirements)
    elif args.cmd == "fetch":
        fetch(args.wheels, args.requirements)
    else:
        install(args.wheels, args.target, args.requirements)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
