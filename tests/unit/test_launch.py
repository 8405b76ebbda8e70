"""tfjob_controller.launch, the entry point: the imports run with the cyclic collector off
and pydantic's plugin discovery off, and the controller runs with the collector back on
and nothing frozen (codec.gc_paused hands its bursts to the oldest generation only while
nothing is). Each case is a fresh interpreter: in this one the
application is imported already."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Records, as the application module is imported, whether the collector is on and what
# the plugin switch says; at exit, the same once the subcommand ran. `explain --help`
# exits at once, through the same main() as the controller.
PROBE = """
import atexit, gc, importlib.abc, os, sys
seen = {}
class Spy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "tfjob_controller.app":
            seen.update(gc=gc.isenabled(), plugins=os.environ.get("PYDANTIC_DISABLE_PLUGINS"))
        return None
sys.meta_path.insert(0, Spy())
def report():
    print("PROBE", seen["gc"], repr(seen["plugins"]), gc.isenabled(), gc.get_freeze_count())
atexit.register(report)
sys.argv = ["tfjob-controller", "explain", "--help"]
from tfjob_controller.launch import main
main()
"""


def probe(env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "usage: tfjob-controller explain" in done.stdout
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("PROBE "))
    return line.split()[1:]


def test_imports_run_without_the_collector_and_the_controller_with_it() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    during_gc, plugins, after_gc, frozen = probe(env)
    assert during_gc == "False"
    assert plugins == "'1'"
    assert after_gc == "True"
    assert frozen == "0"


def test_a_plugin_setting_in_the_environment_is_kept() -> None:
    during_gc, plugins, after_gc, _ = probe({**os.environ, "PYDANTIC_DISABLE_PLUGINS": "logfire"})
    assert plugins == "'logfire'"
    assert (during_gc, after_gc) == ("False", "True")


def test_every_way_in_goes_through_it() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["tfjob-controller"] == "tfjob_controller.launch:main"
    assert (
        "tfjob_controller.launch import main" in (REPO / "tfjob_controller/__main__.py").read_text()
    )
    image = (REPO / "hack/build-controller-image.sh").read_text()
    assert "--entrypoint=-m --entrypoint tfjob_controller " in image
