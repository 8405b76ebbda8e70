"""Enforces the layers: between generic machinery and TFJob logic, and inside each.

- controller/ knows nothing of TFJob: no module in it imports reconcile (or the
  composition root, tfjob_controller/, which sits above both).
- reconcile/ knows nothing of watches, queues or leases: from controller/ it may
  import only the seam (controller.types: protocols and value types), controller.errors
  and controller.observability.prometheus (metric types, which know nothing of the
  loop either).
- Inside each package the parts are ranked (CONTROLLER_RANKS, RECONCILE_RANKS): a
  module may import its own part and parts of a lower rank, never a higher one or a
  sibling of the same rank. A part missing from the table is itself a violation, so a
  new subpackage gets its place before it gets code.

No exceptions. Exits non-zero and names each offending import.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RECONCILE_MAY_IMPORT = {
    "controller.types",
    "controller.errors",
    "controller.observability.prometheus",
}
#: Packages that only the composition root (tfjob_controller/) may import.
ABOVE_MACHINERY = ("reconcile", "tfjob_controller")
#: controller/: the seam's modules at the top level (types, errors, clock) first, then
#: metrics and logging, the API client, the cache, the queue and the report server, the
#: runtime.
CONTROLLER_RANKS = {
    "": 0,
    "observability": 1,
    "client": 2,
    "cache": 3,
    "queue": 3,
    "serving": 3,
    "runtime": 4,
}
#: reconcile/: what a TFJob is, the objects built from it, the policies, the training
#: progress rules (which set conditions as the policies do), the plan, and the two users
#: of the plan: the reconciler's sync layer and explain.
RECONCILE_RANKS = {
    "api": 0,
    "objects": 1,
    "policy": 2,
    "progress": 3,
    "plan": 4,
    "explain": 5,
    "sync": 5,
}
RANKS = {"controller": CONTROLLER_RANKS, "reconcile": RECONCILE_RANKS}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # "from controller import workqueue" imports controller.queue.workqueue, and
            # "from controller.types import JSON" names controller.types.JSON.
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            pkg = path.parent.name
            found.append((node.lineno, f"{pkg}.{node.module or ''}".rstrip(".")))
    return found


def part_of(root: Path, dotted: str) -> str:
    """The part of its package a module belongs to: the subpackage it is in, or for a
    module at the package's top level, "" in controller/ (the seam) and its own name in
    reconcile/ (plan, explain)."""
    bits = dotted.split(".")
    pkg = bits[0]
    if len(bits) == 1 or bits[1] == "__init__":
        return "__init__"
    if (root / pkg / bits[1]).is_dir():
        return bits[1]
    return "" if pkg == "controller" else bits[1]


def _ranked(root: Path, pkg: str, me: str, mod: str) -> str | None:
    """Why ``mod`` may not be imported from part ``me`` of ``pkg``, or None."""
    ranks = RANKS[pkg]
    them = part_of(root, mod)
    if me == "__init__":
        return f"{pkg}/__init__ imports {mod}: a package's map imports nothing"
    for part in (me, them):
        if part not in ranks:
            return f"{pkg}/{part or '(top)'} has no rank in check_layers ({mod})"
    if them != me and ranks[them] >= ranks[me]:
        return f"{pkg}/{me or '(top)'} imports {mod}, of a rank not below its own"
    return None


def violations(root: Path = REPO) -> list[str]:
    out: list[str] = []
    for pkg in ("controller", "reconcile"):
        for path in sorted((root / pkg).rglob("*.py")):
            where = path.relative_to(root)
            me = part_of(root, ".".join(where.with_suffix("").parts))
            for line, mod in imported_modules(path):
                why = _why_not(root, pkg, me, mod)
                if why:
                    out.append(f"{where}:{line}: {why}")
    return out


def _why_not(root: Path, pkg: str, me: str, mod: str) -> str | None:
    top = mod.split(".")[0]
    if pkg == "controller" and top in ABOVE_MACHINERY:
        return f"controller/ imports {mod}"
    if pkg == "reconcile" and top == "tfjob_controller":
        return f"reconcile/ imports {mod}"
    if pkg == "reconcile" and top == "controller":
        if not any(mod == ok or mod.startswith(ok + ".") for ok in RECONCILE_MAY_IMPORT):
            # "from controller.types import X" also yields controller.types.X: allowed.
            return f"reconcile/ imports {mod}"
        return None
    if top == pkg:
        return _ranked(root, pkg, me, mod)
    return None


def main() -> int:
    bad = violations()
    for v in bad:
        print(v, file=sys.stderr)
    if bad:
        print(f"{len(bad)} layering violation(s)", file=sys.stderr)
        return 1
    print("layers ok: controller/ and reconcile/ keep to their sides and their ranks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
