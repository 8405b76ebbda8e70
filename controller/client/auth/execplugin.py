"""Running a kubeconfig's exec credential plugin as client-go does.

kubernetes-asyncio's exec provider leaves out parts of the protocol that managed
clusters' plugins rely on: ``provideClusterInfo`` (the plugin learns which cluster it
authenticates to: ``spec.cluster`` with the server, CA and the cluster's
``client.authentication.k8s.io/exec`` extension), ``interactiveMode`` (``Never`` runs it
with no terminal; ``Always`` refuses to run without one; v1 requires the field), and an
``expirationTimestamp`` given with a client certificate. This module runs the plugin
(``run``) and fills a kubernetes-asyncio loader from its answer (``load_from_plugin``,
installed as the loader's ``load_from_exec_plugin``; ``controller.client.auth.credentials`` decides
when it runs again).

A plugin that does not answer within ``TIMEOUT_SECONDS`` (non-interactive) is killed:
a hung plugin would otherwise hold every request waiting for the credential.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from typing import Any

import anyio

API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
CLUSTER_EXTENSION = "client.authentication.k8s.io/exec"
TIMEOUT_SECONDS = 60.0


class ExecPluginError(Exception):
    """The plugin could not be run, failed, or gave an answer that is not a credential."""


def _interactive(mode: str | None, api_version: str) -> bool:
    if mode is None:
        if api_version.endswith("/v1"):
            raise ExecPluginError(f"exec: interactiveMode must be set for {api_version}")
        mode = "IfAvailable"
    if mode not in ("Never", "IfAvailable", "Always"):
        raise ExecPluginError(f"exec: invalid interactiveMode {mode!r}")
    tty = sys.stdin is not None and sys.stdin.isatty()
    if mode == "Always" and not tty:
        raise ExecPluginError("exec: the plugin needs a terminal (interactiveMode Always)")
    return mode != "Never" and tty


def cluster_info(cluster: dict[str, Any], base_path: str) -> dict[str, Any]:
    """``spec.cluster`` of the ExecCredential: the kubeconfig cluster as the plugin sees
    it (the CA as data, read from its file if need be)."""
    out: dict[str, Any] = {"server": cluster.get("server", "")}
    for key in ("tls-server-name", "insecure-skip-tls-verify", "proxy-url", "disable-compression"):
        if cluster.get(key):
            out[key] = cluster[key]
    if cluster.get("certificate-authority-data"):
        out["certificate-authority-data"] = cluster["certificate-authority-data"]
    elif cluster.get("certificate-authority"):
        with open(os.path.join(base_path, str(cluster["certificate-authority"])), "rb") as f:
            out["certificate-authority-data"] = base64.b64encode(f.read()).decode()
    for ext in cluster.get("extensions") or []:
        if isinstance(ext, dict) and ext.get("name") == CLUSTER_EXTENSION:
            out["config"] = ext.get("extension")
    return out


async def run(
    exec_config: dict[str, Any], cluster: dict[str, Any] | None, base_path: str = ""
) -> dict[str, Any]:
    """Run the plugin once; its ``status`` (token or client certificate, expiry)."""
    command = exec_config.get("command")
    api_version = str(exec_config.get("apiVersion") or "")
    if not command:
        raise ExecPluginError("exec: the kubeconfig's exec has no command")
    if api_version not in API_VERSIONS:
        raise ExecPluginError(f"exec: unsupported apiVersion {api_version!r}")
    interactive = _interactive(exec_config.get("interactiveMode"), api_version)
    spec: dict[str, Any] = {"interactive": interactive}
    if exec_config.get("provideClusterInfo") and cluster is not None:
        spec["cluster"] = cluster_info(cluster, base_path)
    env = dict(os.environ)
    for item in exec_config.get("env") or []:
        env[str(item["name"])] = str(item["value"])
    env["KUBERNETES_EXEC_INFO"] = json.dumps(
        {"apiVersion": api_version, "kind": "ExecCredential", "spec": spec}
    )
    args = [str(command), *(str(a) for a in exec_config.get("args") or [])]
    try:
        with anyio.fail_after(None if interactive else TIMEOUT_SECONDS):
            proc = await anyio.run_process(
                args,
                env=env,
                check=False,
                stdin=None if interactive else subprocess.DEVNULL,
                stderr=None if interactive else subprocess.PIPE,
            )
    except TimeoutError:
        raise ExecPluginError(f"exec: {command} gave no answer in {TIMEOUT_SECONDS:g} s") from None
    except OSError as e:
        raise ExecPluginError(f"exec: cannot run {command}: {e}") from e
    if proc.returncode != 0:
        err = (proc.stderr or b"").decode(errors="replace").strip()[-500:]
        raise ExecPluginError(f"exec: {command} exited with {proc.returncode}: {err}")
    try:
        answer = json.loads(proc.stdout)
    except ValueError as e:
        raise ExecPluginError(f"exec: {command} printed no JSON: {e}") from e
    if not isinstance(answer, dict) or answer.get("kind") != "ExecCredential":
        raise ExecPluginError(f"exec: {command} printed no ExecCredential")
    if answer.get("apiVersion") != api_version:
        raise ExecPluginError(
            f"exec: {command} answered {answer.get('apiVersion')}, not {api_version}"
        )
    status = answer.get("status")
    if not isinstance(status, dict):
        raise ExecPluginError(f"exec: {command}'s ExecCredential has no status")
    if not status.get("token") and not (
        status.get("clientCertificateData") and status.get("clientKeyData")
    ):
        raise ExecPluginError(
            f"exec: {command} gave neither a token nor a client certificate and key"
        )
    return status


async def load_from_plugin(loader: Any) -> bool:
    """Run the loader's exec plugin and keep its answer on the loader: ``token``, or
    ``cert_file``/``key_file``; ``exec_plugin_expiry`` when it gives one. Installed as
    kubernetes-asyncio's ``KubeConfigLoader.load_from_exec_plugin``; it always runs the
    plugin (when to run it is ``controller.client.auth.credentials``'s call)."""
    from kubernetes_asyncio.config.dateutil import parse_rfc3339
    from kubernetes_asyncio.config.kube_config import FileOrData

    cluster = loader._cluster
    base_path = loader._get_base_path(getattr(cluster, "path", None))
    status = await run(
        loader._user["exec"].value, None if cluster is None else cluster.value, base_path
    )
    if status.get("token"):
        loader.token = f"Bearer {status['token']}"
    else:
        for attr, key in (("cert_file", "clientCertificateData"), ("key_file", "clientKeyData")):
            setattr(
                loader,
                attr,
                FileOrData(
                    status,
                    None,
                    data_key_name=key,
                    base64_file_content=False,
                    temp_file_path=loader._temp_file_path,
                ).as_file(),
            )
    if status.get("expirationTimestamp"):
        loader.exec_plugin_expiry = parse_rfc3339(status["expirationTimestamp"])
    elif hasattr(loader, "exec_plugin_expiry"):
        del loader.exec_plugin_expiry
    return True
