from pathlib import Path

from hack import check_layers


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


def test_no_module_of_the_machinery_may_import_upwards(tmp_path: Path) -> None:
    (tmp_path / "controller").mkdir()
    (tmp_path / "reconcile").mkdir()
    (tmp_path / "controller" / "main.py").write_text(
        "from reconcile.tfjob import TFJobReconciler\nimport tfjob_controller.app\n"
    )
    (tmp_path / "reconcile" / "x.py").write_text(
        "from controller.types import JSON\nfrom controller.runtime import Controller\n"
        "from tfjob_controller import app\n"
    )
    assert check_layers.violations(tmp_path) == [
        "controller/main.py:1: controller/ imports reconcile.tfjob.TFJobReconciler",
        "controller/main.py:2: controller/ imports tfjob_controller.app",
        "reconcile/x.py:2: reconcile/ imports controller.runtime.Controller",
        "reconcile/x.py:3: reconcile/ imports tfjob_controller.app",
    ]
