"""Files generated from a source in the repository: written, or checked for staleness."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path


def write_or_check(outputs: dict[Path, str], repo: Path, command: str, check: bool) -> int:
    """Write each file its text, or (``check``) print a diff for each that differs and
    return 1 if any does; ``command`` is what regenerates them."""
    stale = 0
    for output, text in outputs.items():
        rel = output.relative_to(repo)
        if check:
            current = output.read_text() if output.exists() else ""
            if current == text:
                continue
            sys.stdout.writelines(
                difflib.unified_diff(
                    current.splitlines(keepends=True),
                    text.splitlines(keepends=True),
                    f"{rel} (committed)",
                    f"{rel} (generated)",
                )
            )
            print(f"{rel} is stale: run {command}", file=sys.stderr)
            stale = 1
            continue
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        print(f"wrote {rel}")
    return stale
