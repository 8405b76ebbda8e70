"""A kubeconfig exec credential plugin, as EKS's, GKE's and AKS's are: it prints an
ExecCredential with a bearer token and when it expires. The token is a ServiceAccount's,
minted through the TokenRequest API with the admin's client certificate; the expiry it
reports is TFJOB_PLUGIN_LIFE seconds ahead (the apiserver's own minimum is ten minutes,
so the controller is told less than the token really lives). Each run appends a line to
TFJOB_PLUGIN_LOG. Standard library only: it runs as a separate process."""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
import urllib.request
from datetime import UTC, datetime


def main() -> int:
    env = os.environ
    info = json.loads(env.get("KUBERNETES_EXEC_INFO") or "{}")
    api_version = info.get("apiVersion", "client.authentication.k8s.io/v1")
    ns, account = env["TFJOB_PLUGIN_SA"].split("/", 1)
    ctx = ssl.create_default_context(cafile=env["TFJOB_PLUGIN_CA"])
    ctx.load_cert_chain(env["TFJOB_PLUGIN_CERT"], env["TFJOB_PLUGIN_KEY"])
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 600},
    }
    request = urllib.request.Request(
        f"{env['TFJOB_PLUGIN_SERVER']}/api/v1/namespaces/{ns}/serviceaccounts/{account}/token",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, context=ctx, timeout=10) as resp:
        token = json.loads(resp.read())["status"]["token"]
    now = time.time()
    expires = datetime.fromtimestamp(now + float(env["TFJOB_PLUGIN_LIFE"]), UTC)
    with open(env["TFJOB_PLUGIN_LOG"], "a") as log:
        log.write(f"{now:.3f}\n")
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
