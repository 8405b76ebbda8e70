"""JSON in and out of the client: orjson into plain dicts, API errors read off their
bodies, and large bodies decoded with the collector paused.

A large body (a list page) is decoded with the cyclic garbage collector paused
(``gc_paused``): decoding allocates tens of thousands of containers at once, each
allocation burst triggers collections that rescan everything alive, and for a page of
pods that cost 4-6x the decode itself. JSON holds no reference cycles, so nothing is
lost by not looking for them meanwhile.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import orjson

from controller import errors

#: Bodies at least this large are decoded with the garbage collector paused: a list
#: page. Single objects and watch lines are small enough not to matter.
BULK_DECODE_BYTES = 64 * 1024


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a synchronous burst of allocations that
    creates no reference cycles (decoding JSON, building cache entries). Reference
    counting still frees everything; only the cycle search waits. Never hold it across
    an ``await``: other tasks would run with the collector off. Nests safely.

    On the way out, what survived the burst (cache entries, mostly) is handed straight
    to the oldest generation: ``gc.freeze()`` + ``gc.unfreeze()`` splice the young
    generations into it in O(1) and reset the allocation count. Merely re-enabling
    would make the next allocation scan every object of the burst (for a page of pods,
    more CPU than decoding it), then scan them again on their way to the oldest
    generation. Nothing is lost: the next full collection sees them, as it would have.
    Skipped when the application froze objects itself (unfreezing would thaw them)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        gc.enable()


def decode_json(raw: bytes) -> Any:
    """orjson.loads, with the collector paused for bulk bodies (see the module doc)."""
    if len(raw) < BULK_DECODE_BYTES:
        return orjson.loads(raw)
    with gc_paused():
        return orjson.loads(raw)


def _encode_default(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return dict(obj)
    raise TypeError(f"cannot encode {type(obj).__name__} as JSON")


def encode_json(body: Any) -> bytes:
    return orjson.dumps(body, default=_encode_default)


def decode_error(status: int, data: bytes) -> errors.ApiError:
    try:
        body = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict):
        body = {"message": data[:500].decode("utf-8", "replace")}
    return errors.error_from_status(status, body)
