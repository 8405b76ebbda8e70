"""Cache transforms: what an informer applies to each decoded object before storing it.

A transform receives an object freshly decoded for the cache (no one else holds it), may
change it in place, and returns what to store; what it leaves out is never read again,
so a transform is where a controller trades fields it never reads for memory.
"""

from __future__ import annotations

from collections.abc import Callable

from controller.types import JSON

Transform = Callable[[JSON], JSON]


def strip_managed_fields(obj: JSON) -> JSON:
    """Transform dropping metadata.managedFields: often the largest part of an object
    and never read by a controller. Mutates the freshly decoded object in place."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def chain_transforms(*transforms: Transform) -> Transform:
    """One transform applying ``transforms`` in order (each gets the previous result)."""
    if len(transforms) == 1:
        return transforms[0]

    def chained(obj: JSON) -> JSON:
        for transform in transforms:
            obj = transform(obj)
        return obj

    return chained
