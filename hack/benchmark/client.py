"""The harness's own HTTP client (aiohttp + orjson) with a token bucket, and a watch
that yields decoded events."""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import Any

import aiohttp
import orjson


class Bucket:
    """Token bucket with reservations: each take() may go into debt and sleeps it off."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = float(max(burst, 1))
        self.tokens = self.burst
        self.last = time.monotonic()

    async def take(self) -> None:
        if self.qps <= 0:
            return
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.qps)
        self.last = now
        self.tokens -= 1.0
        if self.tokens < 0:
            await asyncio.sleep(-self.tokens / self.qps)


class Http:
    def __init__(self, base: str, ctx: ssl.SSLContext, ua: str, limit: int) -> None:
        self.base = base
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=limit, ssl=ctx),
            headers={"User-Agent": ua, "Accept": "application/json"},
            read_bufsize=2**21,
        )

    async def close(self) -> None:
        await self.session.close()

    async def req(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        ctype: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        data = orjson.dumps(body) if body is not None else None
        headers = {"Content-Type": ctype} if data is not None else None
        async with self.session.request(
            method,
            self.base + path,
            data=data,
            headers=headers,
            params=params,
            timeout=aiohttp.ClientTimeout(total=60),
        ) as r:
            raw = await r.read()
            try:
                return r.status, orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                return r.status, raw.decode(errors="replace")


async def watch(
    http: Http,
    path: str,
    on_event: Any,
    synced: asyncio.Event,
    selector: str | None = None,
    fields: str | None = None,
) -> None:
    """LIST then WATCH ``path`` forever, calling on_event(type, obj, t_monotonic)."""
    params = {"labelSelector": selector} if selector else {}
    if fields:
        params["fieldSelector"] = fields
    status, lst = await http.req("GET", path, params=params)
    if status != 200:
        raise RuntimeError(f"list {path}: {status} {lst}")
    now = time.monotonic()
    for item in lst["items"]:
        on_event("ADDED", item, now)
    rv = lst["metadata"]["resourceVersion"]
    synced.set()
    while True:
        wparams = {
            **params,
            "watch": "1",
            "resourceVersion": rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "600",
        }
        try:
            async with http.session.get(
                http.base + path,
                params=wparams,
                timeout=aiohttp.ClientTimeout(total=None, sock_read=700),
            ) as r:
                while True:
                    line = await r.content.readline()
                    if not line:
                        break
                    t = time.monotonic()
                    ev = orjson.loads(line)
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        raise RuntimeError(f"watch {path}: {obj}")
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if ev.get("type") != "BOOKMARK":
                        on_event(ev["type"], obj, t)
        except (aiohttp.ClientError, TimeoutError):
            await asyncio.sleep(0.2)
