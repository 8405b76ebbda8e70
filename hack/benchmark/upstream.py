"""--compare upstream: the upstream TFJob controller (kubeflow/training-operator's TFJob
reconciler under our wrapper main, hack/upstream-operator/), built and cached by
hack/build-binaries.sh --upstream-operator, run as phases of their own next to ours."""

from __future__ import annotations

import re
import subprocess
from functools import partial
from pathlib import Path

from hack.benchmark.common import REPO, UPSTREAM_UA, say
from hack.benchmark.harness import ControllerPhase
from hack.benchmark.sampling import ControllerProc

#: upstream's own --controller-threads default
UPSTREAM_DEFAULT_THREADS = 1

MODULE = "github.com/kubeflow/training-operator"


def upstream_name() -> str:
    """What the wrapper builds, from its go.mod: "kubeflow/training-operator v1.9.0"."""
    gomod = (REPO / "hack" / "upstream-operator" / "go.mod").read_text()
    found = re.search(rf"^\s*{re.escape(MODULE)} (v\S+)", gomod, re.M)
    return f"kubeflow/training-operator {found.group(1) if found else '?'}"


def build_upstream() -> Path:
    """The binary: built on the first run (progress on stderr), cached afterwards."""
    say("building the upstream TFJob controller (hack/build-binaries.sh --upstream-operator)")
    out = subprocess.run(
        ["bash", str(REPO / "hack" / "build-binaries.sh"), "--upstream-operator"],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    found = [
        ln.split("=", 1)[1] for ln in out.stdout.splitlines() if ln.startswith("upstream-operator=")
    ]
    if not found:
        raise SystemExit("hack/build-binaries.sh printed no upstream-operator= line")
    return Path(found[0])


def upstream_phases(binary: Path, threads: int) -> list[ControllerPhase]:
    """Upstream with ours' thread count, then with its default (one phase if equal)."""
    counts = sorted({threads, UPSTREAM_DEFAULT_THREADS}, reverse=True)
    return [
        ControllerPhase(
            f"upstream-{t}t",
            f"upstream, {t} thread{'s' if t != 1 else ''}"
            + (" (its default)" if t == UPSTREAM_DEFAULT_THREADS else ""),
            UPSTREAM_UA,
            partial(ControllerProc.upstream, binary, threads=t),
        )
        for t in counts
    ]
