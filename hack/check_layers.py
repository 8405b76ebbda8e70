"""Enforces the line between generic machinery and TFJob logic.

- controller/ knows nothing of TFJob: no module in it imports reconcile (or the
  composition root, tfjob_controller/, which sits above both), without exception.
- reconcile/ knows nothing of watches, queues or leases: from controller/ it may
  import only controller.types (protocols and value types), controller.errors and
  controller.prometheus (metric types, which know nothing of the loop either).

Exits non-zero and names each offending import.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RECONCILE_MAY_IMPORT = {"controller.types", "controller.errors", "controller.prometheus"}
#: Packages that only the composition root (tfjob_controller/) may import.
ABOVE_MACHINERY = ("reconcile", "tfjob_controller")


def imported_modules(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # "from controller import workqueue" imports controller.workqueue, and
            # "from controller.types import JSON" names controller.types.JSON.
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            pkg = path.parent.name
            found.append((node.lineno, f"{pkg}.{node.module or ''}".rstrip(".")))
    return found


def violations(root: Path = REPO) -> list[str]:
    out: list[str] = []
    for path in sorted((root / "controller").rglob("*.py")):
        for line, mod in imported_modules(path):
            if any(mod == top or mod.startswith(top + ".") for top in ABOVE_MACHINERY):
                out.append(f"{path.relative_to(root)}:{line}: controller/ imports {mod}")
    for path in sorted((root / "reconcile").rglob("*.py")):
        for line, mod in imported_modules(path):
            if mod == "tfjob_controller" or mod.startswith("tfjob_controller."):
                out.append(f"{path.relative_to(root)}:{line}: reconcile/ imports {mod}")
            elif mod == "controller":
                out.append(f"{path.relative_to(root)}:{line}: reconcile/ imports controller")
            elif mod.startswith("controller.") and not any(
                mod == ok or mod.startswith(ok + ".") for ok in RECONCILE_MAY_IMPORT
            ):
                # "from controller.types import X" also yields controller.types.X: allowed.
                out.append(f"{path.relative_to(root)}:{line}: reconcile/ imports {mod}")
    return out


def main() -> int:
    bad = violations()
    for v in bad:
        print(v, file=sys.stderr)
    if bad:
        print(f"{len(bad)} layering violation(s)", file=sys.stderr)
        return 1
    print("layers ok: controller/ and reconcile/ keep to their sides")
    return 0


if __name__ == "__main__":
    sys.exit(main())
