"""File descriptors: the soft limit raised to the hard one at start, and each server's
connection cap sized from what that leaves.

Go's runtime raises RLIMIT_NOFILE's soft limit to the hard one by itself (since 1.19);
Python does not, so a process started under the usual soft limit of 1,024 had its
servers' caps (4,096 for reports alone) above what it could open: 1,100 bare connects
took every descriptor, and the health probes, the apiserver's connections and the log
with them. After raising, the caps are cut to fit: a ``reserve`` first (the apiserver
pools and watches, the log, certificates being read), then the probes' full share, so
they answer whatever the other ports are doing, then the rest in proportion.
"""

from __future__ import annotations

import resource
from collections.abc import Mapping

import structlog

log = structlog.get_logger("controller.runtime.descriptors")

#: descriptors kept for everything but the servers' connections
DEFAULT_RESERVE = 192


def raise_soft_limit() -> int:
    """The soft RLIMIT_NOFILE raised to the hard limit (as Go's runtime does); the soft
    limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:  # a sandbox may refuse: work within soft
            log.warning("could not raise the descriptor limit", soft=soft, hard=hard, error=str(e))
    return soft


def connection_caps(
    limit: int,
    wanted: Mapping[str, int],
    *,
    first: tuple[str, ...] = (),
    reserve: int = DEFAULT_RESERVE,
) -> dict[str, int]:
    """Each server's cap (pure): ``wanted`` when the ``limit`` has room for all of them
    and the ``reserve``; else ``first``'s servers keep theirs while they fit and the
    others share what is left in proportion to what they wanted. Never below 1."""
    room = max(0, limit - reserve)
    caps: dict[str, int] = {}
    for name in first:
        if name in wanted:
            caps[name] = max(1, min(wanted[name], room))
            room = max(0, room - caps[name])
    rest = {k: v for k, v in wanted.items() if k not in caps}
    total = sum(rest.values())
    for name, want in rest.items():
        share = want if total <= room else room * want // total if total else 0
        caps[name] = max(1, min(want, share))
    return caps
