"""hack/kind.sh is for machines with Docker: elsewhere it refuses in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_without_docker_one_clear_line_and_a_non_zero_exit(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"  # a PATH with what the script needs and no docker
    bin_dir.mkdir()
    for tool in ("dirname", "date"):
        found = shutil.which(tool)
        assert found is not None
        os.symlink(found, bin_dir / tool)
    bash = shutil.which("bash")
    assert bash is not None
    for verb in ("up", "load", "deploy", "e2e", "down"):
        proc = subprocess.run(
            [bash, str(REPO / "hack" / "kind.sh"), verb],
            env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode == 1, (verb, proc.stderr)
        assert proc.stdout == ""
        assert proc.stderr.splitlines() == [
            "hack/kind.sh: Docker is not installed; kind runs its nodes as Docker containers"
        ], proc.stderr
