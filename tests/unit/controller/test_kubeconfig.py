"""controller.kubeconfig: kubernetes-asyncio's kubeconfig loader without its generated
client. Checked in a fresh interpreter, since this one has loaded the package in full."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
from controller.api import load_configuration
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
