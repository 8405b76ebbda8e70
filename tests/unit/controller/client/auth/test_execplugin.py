"""controller.client.auth.execplugin: the exec credential protocol as client-go speaks it, with a
real plugin process (a script written by the test)."""

from __future__ import annotations

import base64
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.client.api import KubeApi, load_configuration
from controller.client.auth import credentials
from controller.client.auth.execplugin import ExecPluginError

#: Records what it was given, then answers from a numbered list of answers: run N gives
#: answers[N] (the last one again once they run out).
PLUGIN = """#!{python}
import json, os, pathlib, sys
here = pathlib.Path(sys.argv[1])
runs = here / "runs"
n = len(runs.read_text().splitlines()) if runs.exists() else 0
with runs.open("a") as f:
    f.write(os.environ["KUBERNETES_EXEC_INFO"] + "\\n")
answers = json.loads((here / "answers.json").read_text())
status = answers[min(n, len(answers) - 1)]
if status == "fail":
    print("no network", file=sys.stderr)
    sys.exit(3)
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}}))
"""


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def setup(
    tmp_path: Path,
    answers: list[Any],
    *,
    exec_extra: dict[str, Any] | None = None,
    cluster_extra: dict[str, Any] | None = None,
) -> Path:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(PLUGIN.format(python=sys.executable))
    plugin.chmod(0o755)
    (tmp_path / "answers.json").write_text(json.dumps(answers))
    exec_cfg: dict[str, Any] = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": str(plugin),
        "args": [str(tmp_path)],
        "interactiveMode": "Never",
        "env": [{"name": "PLUGIN_REGION", "value": "eu-1"}],
        **(exec_extra or {}),
    }
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": "http://127.0.0.1:1", **(cluster_extra or {})}}
        ],
        "users": [{"name": "u", "user": {"exec": exec_cfg}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    return path


def runs(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "runs").read_text().splitlines()]


async def test_the_plugin_learns_its_cluster_when_it_asks(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    path = setup(
        tmp_path,
        [{"token": "t-1"}],
        exec_extra={"provideClusterInfo": True},
        cluster_extra={
            "certificate-authority": "ca.crt",
            "tls-server-name": "api.internal",
            "extensions": [
                {"name": "client.authentication.k8s.io/exec", "extension": {"audience": "x"}},
                {"name": "other", "extension": {"ignored": True}},
            ],
        },
    )
    cfg = await load_configuration(str(path))
    assert cfg.api_key["BearerToken"] == "Bearer t-1"
    [info] = runs(tmp_path)
    assert info["kind"] == "ExecCredential"
    assert info["spec"]["interactive"] is False  # interactiveMode Never
    assert info["spec"]["cluster"] == {
        "server": "http://127.0.0.1:1",
        "tls-server-name": "api.internal",
        "certificate-authority-data": base64.b64encode(ca.read_bytes()).decode(),
        "config": {"audience": "x"},
    }


async def test_without_provide_cluster_info_the_plugin_is_told_nothing(tmp_path: Path) -> None:
    await load_configuration(str(setup(tmp_path, [{"token": "t-1"}])))
    assert "cluster" not in runs(tmp_path)[0]["spec"]


@pytest.mark.parametrize(
    ("exec_extra", "message"),
    [
        ({"interactiveMode": None}, "interactiveMode must be set"),
        ({"interactiveMode": "Always"}, "needs a terminal"),
        ({"interactiveMode": "Sometimes"}, "invalid interactiveMode"),
        ({"apiVersion": "client.authentication.k8s.io/v1alpha1"}, "unsupported apiVersion"),
    ],
)
async def test_a_plugin_configured_wrongly_is_refused_saying_why(
    tmp_path: Path, exec_extra: dict[str, Any], message: str
) -> None:
    extra = {k: v for k, v in exec_extra.items() if v is not None}
    path = setup(tmp_path, [{"token": "t-1"}], exec_extra=extra)
    if exec_extra.get("interactiveMode", "") is None:
        cfg = yaml.safe_load(path.read_text())
        del cfg["users"][0]["user"]["exec"]["interactiveMode"]
        path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ExecPluginError, match=message):
        await load_configuration(str(path))


async def test_a_failing_plugin_says_what_it_printed(tmp_path: Path) -> None:
    with pytest.raises(ExecPluginError, match="exited with 3: no network"):
        await load_configuration(str(setup(tmp_path, ["fail"])))


async def test_an_answer_without_a_credential_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ExecPluginError, match="neither a token nor a client certificate"):
        await load_configuration(str(setup(tmp_path, [{"expirationTimestamp": _iso(0)}])))


async def test_client_certificates_are_renewed_when_they_expire(tmp_path: Path) -> None:
    """A plugin that answers with a certificate and key: when they expire it runs again
    and the client opens new connections with the new pair."""
    now = time.time()
    answers = [
        {
            "clientCertificateData": "CERT-A",
            "clientKeyData": "KEY-A",
            "expirationTimestamp": _iso(now),
        },
        {
            "clientCertificateData": "CERT-B",
            "clientKeyData": "KEY-B",
            "expirationTimestamp": _iso(now + 3600),
        },
    ]
    cfg = await load_configuration(str(setup(tmp_path, answers)))
    assert _read(cfg.cert_file) == b"CERT-A" and _read(cfg.key_file) == b"KEY-A"
    creds = credentials.of(cfg)
    assert creds is not None and creds.tls_generation == 0
    api = KubeApi(cfg)
    try:
        first = api._get_pool(stream=False)
        await api._auth_headers()  # what every request does first: the pair is due
        assert len(runs(tmp_path)) == 2
        assert _read(cfg.cert_file) == b"CERT-B" and _read(cfg.key_file) == b"KEY-B"
        assert creds.tls_generation == 1
        second = api._get_pool(stream=False)
        assert second is not first, "new connections carry the new certificate"
        assert api._retired == [first], "the old pool is kept for its open streams"
        await api._auth_headers()
        assert len(runs(tmp_path)) == 2, "the new pair is good for an hour"
    finally:
        await api.close()
    assert first.closed and second.closed


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()
