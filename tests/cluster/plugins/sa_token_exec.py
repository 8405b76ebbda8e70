"""A kubeconfig exec credential plugin, as EKS's, GKE's and AKS's are: it prints an
ExecCredential with a bearer token and when it expires. The token is a ServiceAccount's,
minted through the TokenRequest API with the admin's client certificate; the expiry it
reports is TFJOB_PLUGIN_LIFE seconds ahead (the apiserver's own minimum is ten minutes,
so the controller is told less than the token really lives).

Each token is bound to a Secret made for it (TokenRequest's boundObjectRef): deleting
that Secret ends the token at once, so a test can make a token the controller should no
longer use fail the moment it is used. Each run appends "<time> <secret name>" to
TFJOB_PLUGIN_LOG. Standard library only: it runs as a separate process."""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
import urllib.request
from datetime import UTC, datetime
from typing import Any


def post(ctx: ssl.SSLContext, url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, context=ctx, timeout=10) as resp:
        out: dict[str, Any] = json.loads(resp.read())
        return out


def main() -> int:
    env = os.environ
    info = json.loads(env.get("KUBERNETES_EXEC_INFO") or "{}")
    api_version = info.get("apiVersion", "client.authentication.k8s.io/v1")
    ns, account = env["TFJOB_PLUGIN_SA"].split("/", 1)
    ctx = ssl.create_default_context(cafile=env["TFJOB_PLUGIN_CA"])
    ctx.load_cert_chain(env["TFJOB_PLUGIN_CERT"], env["TFJOB_PLUGIN_KEY"])
    base = f"{env['TFJOB_PLUGIN_SERVER']}/api/v1/namespaces/{ns}"
    secret = post(ctx, f"{base}/secrets", {"metadata": {"generateName": "tfjob-exec-token-"}})
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": 600,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Secret",
                "name": secret["metadata"]["name"],
                "uid": secret["metadata"]["uid"],
            },
        },
    }
    token = post(ctx, f"{base}/serviceaccounts/{account}/token", body)["status"]["token"]
    now = time.time()
    expires = datetime.fromtimestamp(now + float(env["TFJOB_PLUGIN_LIFE"]), UTC)
    with open(env["TFJOB_PLUGIN_LOG"], "a") as log:
        log.write(f"{now:.3f} {secret['metadata']['name']}\n")
    json.dump(
        {
            "apiVersion": api_version,
            "kind": "ExecCredential",
            "status": {
                "token": token,
                "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        },
        sys.stdout,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
