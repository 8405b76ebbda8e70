"""controller.client.auth.kubeconfig: kubernetes-asyncio's kubeconfig loader without its generated
client. Checked in a fresh interpreter, since this one has loaded the package in full."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from controller.client.api import _ssl_context, load_configuration
from tests.unit.controller.conftest import self_signed

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://192.0.2.7:6443", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: "t0ken"}
contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
"""

PROBE = """
import asyncio, json, sys
from controller.client.api import load_configuration
cfg = asyncio.run(load_configuration(sys.argv[1]))
import kubernetes_asyncio.client as client
try:
    client.ApiClient()
    stand_in = False
except RuntimeError:
    stand_in = True
print(json.dumps({
    "host": cfg.host,
    "token": cfg.api_key.get("BearerToken") or cfg.api_key.get("authorization"),
    "models": "kubernetes_asyncio.client.models" in sys.modules,
    "stand_in": stand_in,
}))
"""


def test_the_kubeconfig_loads_without_the_generated_client(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["host"] == "https://192.0.2.7:6443"
    assert "t0ken" in str(got["token"])
    assert got["models"] is False, "the generated API client was imported"
    assert got["stand_in"] is True


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


async def test_inline_credentials_never_touch_a_filesystem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only root filesystem (the Deployment's) has no temporary directory: inline
    CA, certificate and key reach OpenSSL from memory, and the TLS context loads them."""
    crt_path, key_path = self_signed(tmp_path)
    crt, key = crt_path.read_bytes(), key_path.read_bytes()
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": "https://192.0.2.7:6443",
                            "certificate-authority-data": b64(crt),
                        },
                    }
                ],
                "users": [
                    {
                        "name": "u",
                        "user": {
                            "client-certificate-data": b64(crt),
                            "client-key-data": b64(key),
                        },
                    }
                ],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )

    def no_temp_files(*args: object, **kwargs: object) -> None:
        raise AssertionError("a credential was written to a temporary file")

    monkeypatch.setattr(tempfile, "mkstemp", no_temp_files)
    cfg = await load_configuration(str(path))
    for attr, want in (("ssl_ca_cert", crt), ("cert_file", crt), ("key_file", key)):
        got = getattr(cfg, attr)
        assert got.startswith("/proc/self/fd/"), (attr, got)
        assert _read(got) == want
    assert _ssl_context(cfg).verify_mode == ssl.CERT_REQUIRED
