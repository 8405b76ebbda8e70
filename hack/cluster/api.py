"""Talking to the apiserver with the standard library only, so `up` needs no client
library."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class Api:
    def __init__(self, d: Path, port: int, server: str | None = None) -> None:
        """The cluster in ``d`` (its pki/) on loopback ``port``, or at ``server``."""
        self.base = server.rstrip("/") if server else f"https://127.0.0.1:{port}"
        self.ctx = ssl.create_default_context(cafile=str(d / "pki" / "ca.crt"))
        self.ctx.load_cert_chain(str(d / "pki" / "admin.crt"), str(d / "pki" / "admin.key"))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        """``headers`` go with the request as they are (``Impersonate-User``: the admin
        acting as a tenant whom RBAC limits)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=10) as r:
                raw = r.read()
                status = r.status
        except urllib.error.HTTPError as e:
            raw, status = e.read(), e.code
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def ready(self) -> bool:
        try:
            status, _body = self.request("GET", "/readyz")
        except (OSError, ssl.SSLError):
            return False
        return status == 200

    def apply(self, obj: dict[str, Any], collection: str) -> None:
        """Create, or replace if it exists (server-side apply keeps this idempotent)."""
        name = obj["metadata"]["name"]
        status, body = self.request(
            "PATCH",
            f"{collection}/{name}?fieldManager=tfjob-cluster&force=true",
            obj,
            content_type="application/apply-patch+yaml",
        )
        if status >= 300:
            raise RuntimeError(f"apply {collection}/{name}: {status} {body}")

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """Create namespace ``name`` and wait until its ``default`` ServiceAccount exists:
        until KCM's serviceaccount controller has made it, ServiceAccount admission
        refuses every pod of the namespace."""
        meta: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
        status, body = self.request("POST", "/api/v1/namespaces", {"metadata": meta})
        if status not in (201, 409):
            raise RuntimeError(f"create namespace {name}: {status} {body}")
        self.wait_default_service_account(name)

    def wait_default_service_account(self, namespace: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
        while True:
            status, body = self.request("GET", path)
            if status == 200:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"no default ServiceAccount in {namespace}: {status} {body}")
            time.sleep(0.02)
