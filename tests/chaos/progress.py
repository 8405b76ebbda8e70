"""Progress lines: wall clock and seconds since the run started."""

from __future__ import annotations

import time

T0 = time.monotonic()


def say(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')} +{time.monotonic() - T0:5.0f}s] {msg}", flush=True)
