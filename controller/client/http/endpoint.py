"""Where requests go: the server's address and an optional proxy."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit


def redact(url: str) -> str:
    """``url`` with the password of its userinfo replaced, for messages and logs."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, hostpart = rest.rpartition("@")
    if not (sep and at) or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.partition(':')[0]}:xxxxx@{hostpart}"


@dataclass(frozen=True, slots=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    #: a path prefix the server is mounted under (some proxies put clusters there)
    base_path: str = ""

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"{redact(url)!r}: not a URL ({exc})") from None
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{redact(url)!r}: not an http:// or https:// address")
        port = port or (443 if scheme == "https" else 80)
        return cls(scheme, parts.hostname, port, parts.path.rstrip("/"))

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Proxy:
    endpoint: Endpoint
    authorization: str | None = None

    @classmethod
    def parse(cls, url: str) -> Proxy:
        parts = urlsplit(url)
        auth = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            auth = "Basic " + base64.b64encode(pair.encode()).decode()
        return cls(Endpoint.parse(url), auth)
