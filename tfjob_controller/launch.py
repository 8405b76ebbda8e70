"""The controller's entry point: ``tfjob-controller``, ``python -m tfjob_controller``.

It does two things before the application is imported, both to cut what a start costs
(a fixed CPU cost that every restart and every failover pays):

- The cyclic garbage collector is off while the imports run. They allocate some
  hundred thousand objects, all of which live as long as the process (modules,
  classes, pydantic's validators), so every collection they set off walks a growing
  heap and frees nothing: about 30 ms of a 0.4 s start. Before the controller runs,
  the survivors are moved to the oldest generation in one step (``gc.freeze`` then
  ``gc.unfreeze``, as ``controller.client.codec.gc_paused`` does after a list page)
  and collection is back on. Nothing is left frozen: ``gc_paused`` moves its bursts
  that way only while nothing is, and once the caches have synced
  ``controller.observability.heap`` collects once and freezes what survived.
- pydantic's plugin discovery is off (``PYDANTIC_DISABLE_PLUGINS``, unless the
  environment sets it): the controller uses no plugin, and discovery reads the metadata
  of every installed distribution when the first model is built.
"""

from __future__ import annotations

import gc
import os


def main() -> None:
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "1")
    gc.disable()
    try:
        from tfjob_controller.app import main as run
    finally:
        gc.freeze()
        gc.unfreeze()
        gc.enable()
    run()
