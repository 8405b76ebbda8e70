import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

import check_layers


def test_controller_and_reconcile_keep_to_their_sides() -> None:
    assert check_layers.violations() == []


def test_the_check_sees_every_import_form(tmp_path: Path) -> None:
    bad = tmp_path / "reconcile" / "x.py"
    bad.parent.mkdir()
    bad.write_text(
        "from controller.workqueue import WorkQueue\n"
        "from controller import leader\n"
        "import controller.informer\n"
        "from controller.types import JSON\n"
    )
    mods = [m for _, m in check_layers.imported_modules(bad)]
    assert mods == [
        "controller.workqueue.WorkQueue",
        "controller.leader",
        "controller.informer",
        "controller.types.JSON",
    ]
