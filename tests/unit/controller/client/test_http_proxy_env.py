"""The transport a kubeconfig settles on, as client-go would: the proxy from the
environment (golang.org/x/net/http/httpproxy's rules), insecure-skip-tls-verify with a CA
refused, and a proxy's password kept out of start-up errors."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from controller.client import http
from controller.client.api import load_configuration
from controller.client.auth.kubeconfig import (
    new_configuration,
    proxy_from_environment,
    settle_transport,
)

P = "http://proxy.corp:3128"

# (server URL, environment, the proxy Go would use)
CASES: list[tuple[str, dict[str, str], str | None]] = [
    # by scheme; upper case wins over lower; an empty one is not set
    ("https://api.corp:6443", {"HTTPS_PROXY": P}, P),
    ("https://api.corp:6443", {"https_proxy": P}, P),
    ("https://api.corp:6443", {"HTTPS_PROXY": P, "https_proxy": "http://other:1"}, P),
    ("https://api.corp:6443", {"HTTPS_PROXY": "", "https_proxy": P}, P),
    ("https://api.corp:6443", {"HTTP_PROXY": P}, None),
    ("http://api.corp:8080", {"HTTP_PROXY": P}, P),
    ("http://api.corp:8080", {"HTTPS_PROXY": P}, None),
    ("https://api.corp:6443", {}, None),
    # a value without a scheme is an http:// proxy
    ("https://api.corp", {"HTTPS_PROXY": "proxy.corp:3128"}, P),
    ("https://api.corp", {"HTTPS_PROXY": "socks5://s:1080"}, "socks5://s:1080"),
    # never for localhost or a loopback address, whatever NO_PROXY says
    ("https://localhost:6443", {"HTTPS_PROXY": P}, None),
    ("https://127.0.0.1:6443", {"HTTPS_PROXY": P}, None),
    ("https://127.9.9.9:6443", {"HTTPS_PROXY": P}, None),
    ("https://[::1]:6443", {"HTTPS_PROXY": P}, None),
    ("https://localhost.corp:6443", {"HTTPS_PROXY": P}, P),
    # NO_PROXY: "*"; lower case too, upper case first
    ("https://api.corp", {"HTTPS_PROXY": P, "NO_PROXY": "*"}, None),
    ("https://api.corp", {"HTTPS_PROXY": P, "no_proxy": "*"}, None),
    ("https://api.corp", {"HTTPS_PROXY": P, "NO_PROXY": "x.org", "no_proxy": "*"}, P),
    # domains: a bare one covers itself and its subdomains; a leading dot or *. only these
    ("https://api.corp", {"HTTPS_PROXY": P, "NO_PROXY": "api.corp"}, None),
    ("https://a.api.corp", {"HTTPS_PROXY": P, "NO_PROXY": "api.corp"}, None),
    ("https://xapi.corp", {"HTTPS_PROXY": P, "NO_PROXY": "api.corp"}, P),
    ("https://api.corp", {"HTTPS_PROXY": P, "NO_PROXY": ".api.corp"}, P),
    ("https://a.api.corp", {"HTTPS_PROXY": P, "NO_PROXY": ".api.corp"}, None),
    ("https://api.corp", {"HTTPS_PROXY": P, "NO_PROXY": "*.api.corp"}, P),
    ("https://a.api.corp", {"HTTPS_PROXY": P, "NO_PROXY": "*.api.corp"}, None),
    ("https://API.Corp", {"HTTPS_PROXY": P, "NO_PROXY": " x.org , API.CORP "}, None),
    ("https://a.corp", {"HTTPS_PROXY": P, "NO_PROXY": ",, x.org,"}, P),
    # ports: the server's, its scheme's default when it names none
    ("https://api.corp:6443", {"HTTPS_PROXY": P, "NO_PROXY": "api.corp:6443"}, None),
    ("https://api.corp:6443", {"HTTPS_PROXY": P, "NO_PROXY": "api.corp:443"}, P),
    ("https://api.corp", {"HTTPS_PROXY": P, "NO_PROXY": "api.corp:443"}, None),
    ("https://api.corp", {"HTTPS_PROXY": P, "NO_PROXY": ":443"}, P),
    # IP addresses and CIDRs (a CIDR takes no port; a domain entry never matches an IP's
    # text unless its suffix does)
    ("https://10.1.2.3:6443", {"HTTPS_PROXY": P, "NO_PROXY": "10.1.2.3"}, None),
    ("https://10.1.2.3:6443", {"HTTPS_PROXY": P, "NO_PROXY": "10.1.2.4"}, P),
    ("https://10.1.2.3:6443", {"HTTPS_PROXY": P, "NO_PROXY": "10.1.2.3:6443"}, None),
    ("https://10.1.2.3:6443", {"HTTPS_PROXY": P, "NO_PROXY": "10.1.2.3:443"}, P),
    ("https://10.1.2.3:6443", {"HTTPS_PROXY": P, "NO_PROXY": "10.0.0.0/8"}, None),
    ("https://11.1.2.3:6443", {"HTTPS_PROXY": P, "NO_PROXY": "10.0.0.0/8"}, P),
    ("https://10.1.2.3:6443", {"HTTPS_PROXY": P, "NO_PROXY": "10.0.0.0/33"}, P),
    ("https://api.corp", {"HTTPS_PROXY": P, "NO_PROXY": "10.0.0.0/8"}, P),
    ("https://[fd00::5]:6443", {"HTTPS_PROXY": P, "NO_PROXY": "fd00::/8"}, None),
    ("https://[fd00::5]:6443", {"HTTPS_PROXY": P, "NO_PROXY": "fd00::5"}, None),
    ("https://[fd00::5]:6443", {"HTTPS_PROXY": P, "NO_PROXY": "[fd00::5]:6443"}, None),
    ("https://[fd00::5]:6443", {"HTTPS_PROXY": P, "NO_PROXY": "[fd00::5]:1"}, P),
    ("https://10.1.2.3", {"HTTPS_PROXY": P, "NO_PROXY": "2.3"}, None),
]


@pytest.mark.parametrize(("url", "env", "want"), CASES)
def test_the_proxy_from_the_environment(url: str, env: dict[str, str], want: str | None) -> None:
    assert proxy_from_environment(url, env) == want


def _cfg(host: str, *, proxy: str | None = None, insecure: bool = False, ca: str | None = None):  # type: ignore[no-untyped-def]
    cfg = new_configuration()
    cfg.host = host
    cfg.proxy = proxy
    cfg.verify_ssl = not insecure
    cfg.ssl_ca_cert = ca
    return cfg


def test_the_kubeconfig_proxy_url_wins_over_the_environment() -> None:
    env = {"HTTPS_PROXY": "http://env:1", "NO_PROXY": "*"}
    cfg = _cfg("https://api.corp", proxy="http://kube:2")
    settle_transport(cfg, env)
    assert cfg.proxy == "http://kube:2", "proxy-url applies to every request, NO_PROXY or not"
    cfg = _cfg("https://api.corp")
    settle_transport(cfg, {"HTTPS_PROXY": "http://env:1"})
    assert cfg.proxy == "http://env:1"
    cfg = _cfg("https://127.0.0.1:6443")
    settle_transport(cfg, {"HTTPS_PROXY": "http://env:1"})
    assert cfg.proxy is None


# (insecure-skip-tls-verify, CA file, refused)
TLS_CASES = [(True, "/ca.crt", True), (True, None, False), (False, "/ca.crt", False)]


@pytest.mark.parametrize(("insecure", "ca", "refused"), TLS_CASES)
def test_insecure_with_a_ca_is_refused(insecure: bool, ca: str | None, refused: bool) -> None:
    cfg = _cfg("https://api.corp", insecure=insecure, ca=ca)
    if refused:
        with pytest.raises(ValueError, match="root certificates file with the insecure flag"):
            settle_transport(cfg, {})
    else:
        settle_transport(cfg, {})


def _kubeconfig(tmp_path: Path, **cluster: object) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://192.0.2.7:6443", **cluster}}],
        "users": [{"name": "u", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


async def test_a_kubeconfig_with_insecure_and_ca_data_is_refused_at_load(tmp_path: Path) -> None:
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    path = _kubeconfig(
        tmp_path, **{"insecure-skip-tls-verify": True, "certificate-authority-data": ca}
    )
    with pytest.raises(ValueError, match="not allowed"):
        await load_configuration(path)


async def test_the_environment_proxy_is_settled_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "proxy.corp:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    cfg = await load_configuration(_kubeconfig(tmp_path, **{"insecure-skip-tls-verify": True}))
    assert cfg.proxy == "http://proxy.corp:3128"
    monkeypatch.setenv("NO_PROXY", "192.0.2.0/24")
    cfg = await load_configuration(_kubeconfig(tmp_path, **{"insecure-skip-tls-verify": True}))
    assert cfg.proxy is None


async def test_a_proxy_password_stays_out_of_start_up_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Depends on redact() in settle_transport's message (it printed the URL whole)."""
    path = _kubeconfig(
        tmp_path,
        **{"insecure-skip-tls-verify": True, "proxy-url": "socks5://alice:s3cret@p:1080"},
    )
    with pytest.raises(ValueError, match="only http:// and https:// proxies") as caught:
        await load_configuration(path)
    assert "s3cret" not in str(caught.value) and "alice:xxxxx@p:1080" in str(caught.value)
    monkeypatch.setenv("HTTPS_PROXY", "socks5://bob:hunter2@p:1080")
    with pytest.raises(ValueError, match="from the environment") as caught:
        await load_configuration(_kubeconfig(tmp_path, **{"insecure-skip-tls-verify": True}))
    assert "hunter2" not in str(caught.value)
    with pytest.raises(ValueError) as caught:
        http.Proxy.parse("http://carol:pa55@:99999")
    assert "pa55" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://u:p@h:1", "http://u:xxxxx@h:1"),
        ("http://u@h:1", "http://u@h:1"),
        ("http://h:1", "http://h:1"),
        ("https://u:p@ss:w@h", "https://u:xxxxx@h"),
        ("not a url", "not a url"),
    ],
)
def test_redact(url: str, shown: str) -> None:
    assert http.redact(url) == shown
