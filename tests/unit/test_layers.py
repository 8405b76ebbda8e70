from pathlib import Path

from hack import check_layers


def test_controller_and_reconcile_keep_to_their_sides_and_ranks() -> None:
    assert check_layers.violations() == []


def test_the_check_sees_every_import_form(tmp_path: Path) -> None:
    bad = tmp_path / "reconcile" / "x.py"
    bad.parent.mkdir()
    bad.write_text(
        "from controller.queue.workqueue import WorkQueue\n"
        "from controller import leader\n"
        "import controller.cache.informer\n"
        "from controller.types import JSON\n"
    )
    mods = [m for _, m in check_layers.imported_modules(bad)]
    assert mods == [
        "controller.queue.workqueue.WorkQueue",
        "controller.leader",
        "controller.cache.informer",
        "controller.types.JSON",
    ]


def tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_no_module_of_the_machinery_may_import_upwards(tmp_path: Path) -> None:
    tree(
        tmp_path,
        {
            "controller/main.py": "from reconcile.sync.tfjob import TFJobReconciler\n"
            "import tfjob_controller.app\n",
            "reconcile/x.py": "from controller.types import JSON\n"
            "from controller.runtime.controller import Controller\n"
            "from tfjob_controller import app\n",
            "controller/runtime/controller.py": "",
        },
    )
    assert check_layers.violations(tmp_path) == [
        "controller/main.py:1: controller/ imports reconcile.sync.tfjob.TFJobReconciler",
        "controller/main.py:2: controller/ imports tfjob_controller.app",
        "reconcile/x.py:2: reconcile/ imports controller.runtime.controller.Controller",
        "reconcile/x.py:3: reconcile/ imports tfjob_controller.app",
    ]


def test_inside_a_package_a_part_imports_only_lower_ranks(tmp_path: Path) -> None:
    tree(
        tmp_path,
        {
            # allowed: the seam, a lower part, its own part
            "controller/runtime/a.py": "from controller.types import JSON\n"
            "from controller.queue.workqueue import WorkQueue\n"
            "from controller.runtime import b\n",
            "controller/runtime/b.py": "",
            "controller/queue/workqueue.py": "",
            "controller/types.py": "",
            # upwards, and a sibling of the same rank
            "controller/client/api.py": "from controller.runtime.a import x\n",
            "controller/cache/informer.py": "from controller.queue import workqueue\n",
            # a part the table does not rank
            "controller/extras/x.py": "from controller.types import JSON\n",
            "reconcile/api/models.py": "from reconcile.policy.restart import R\n",
            "reconcile/policy/restart.py": "from reconcile.api import models\n"
            "from reconcile.plan import compute_plan\n",
            "reconcile/plan.py": "from reconcile.policy import restart\n",
            "reconcile/__init__.py": "from reconcile import plan\n",
        },
    )
    assert check_layers.violations(tmp_path) == [
        "controller/cache/informer.py:1: controller/cache imports controller.queue.workqueue,"
        " of a rank not below its own",
        "controller/client/api.py:1: controller/client imports controller.runtime.a.x,"
        " of a rank not below its own",
        "controller/extras/x.py:1: controller/extras has no rank in check_layers"
        " (controller.types.JSON)",
        "reconcile/__init__.py:1: reconcile/__init__ imports reconcile.plan: a package's map"
        " imports nothing",
        "reconcile/api/models.py:1: reconcile/api imports reconcile.policy.restart.R,"
        " of a rank not below its own",
        "reconcile/policy/restart.py:2: reconcile/policy imports reconcile.plan.compute_plan,"
        " of a rank not below its own",
    ]
