"""kubernetes-asyncio's kubeconfig and in-cluster loaders, without its generated client.

The controller uses kubernetes-asyncio for one thing: reading a kubeconfig (contexts,
certificates, tokens, exec plugins, OIDC) into a ``Configuration``. Importing
``kubernetes_asyncio.config`` the ordinary way first runs the package's ``__init__``,
which imports the whole generated API client (thousands of model classes): about 40 MB
of memory and 0.3 s of start-up, for code the controller never calls.

So, when nothing has imported kubernetes-asyncio yet, its two packages are entered as
bare modules that only know where their files are: the loader's modules and
``client.configuration`` then import as usual, and nothing else does. The loader also
names ``ApiClient`` (only for helpers that build a generated client, which the
controller does not use); it gets a stand-in that says so if ever called. When the
package is already imported in full (a test, a user's program), it is used as it is.

Credentials given inline (``certificate-authority-data``, ``client-key-data``, an exec
plugin's ``clientKeyData``) must reach OpenSSL as a path. The loader writes them to
files under the temporary directory, which fails in a container with a read-only root
filesystem (as the Deployment runs it) and leaves private keys on disk. On Linux they go
to anonymous memory files instead (memfd_create, opened as /proc/self/fd/N): nothing is
written to a filesystem, and nothing outlives the process.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import ipaddress
import os
import re
import sys
import types
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from controller.client.auth.credentials import refresh_oidc
from controller.client.auth.execplugin import load_from_plugin
from controller.client.http import redact

if TYPE_CHECKING:
    from kubernetes_asyncio.client.configuration import Configuration

PACKAGE = "kubernetes_asyncio"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class _NoApiClient:
    """Stands in for the generated client's ApiClient, which is not loaded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("tfjob-controller loads no generated Kubernetes API client")


class _NoOpenIDRequestor:
    """Stands in for the loader's OIDC requestor, which refresh_oidc replaces."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the OIDC refresh is controller.client.auth.credentials.refresh_oidc")


def _bare_package(name: str) -> types.ModuleType:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError(f"{name} is not installed")
    module = types.ModuleType(name)
    module.__path__ = list(spec.submodule_search_locations)
    module.__spec__ = spec
    sys.modules[name] = module
    return module


#: content digest -> the memory file's path; the files live as long as the process (a
#: kubeconfig has a few; an exec plugin that hands out certificates adds a pair a run)
_memory_files: dict[str, str] = {}


def memory_file(content: bytes | str) -> str:
    """A path OpenSSL can open that holds ``content``, in memory only (Linux)."""
    data = content.encode() if isinstance(content, str) else content
    key = hashlib.sha256(data).hexdigest()
    path = _memory_files.get(key)
    if path is None:
        fd = os.memfd_create("kubeconfig-credential", os.MFD_CLOEXEC)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        path = _memory_files[key] = f"/proc/self/fd/{fd}"
    return path


def _in_memory(self: Any, content: bytes | str) -> str:
    return memory_file(content)


def config_module() -> Any:
    """``kubernetes_asyncio.config`` (load_kube_config, load_incluster_config)."""
    if PACKAGE not in sys.modules:
        top = _bare_package(PACKAGE)
        client = _bare_package(f"{PACKAGE}.client")
        configuration = importlib.import_module(f"{PACKAGE}.client.configuration")
        client.Configuration = configuration.Configuration  # type: ignore[attr-defined]
        client.ApiClient = _NoApiClient  # type: ignore[attr-defined]
        top.client = client  # type: ignore[attr-defined]
        # The loader's OIDC requestor is replaced (refresh_oidc below) but imported at
        # its module's top, and it imports aiohttp: ~13 MB resident for nothing.
        openid = types.ModuleType(f"{PACKAGE}.config.openid")
        openid.OpenIDRequestor = _NoOpenIDRequestor  # type: ignore[attr-defined]
        sys.modules.setdefault(openid.__name__, openid)
    module = importlib.import_module(f"{PACKAGE}.config")
    loader = importlib.import_module(f"{PACKAGE}.config.kube_config")
    # the exec protocol and the OIDC refresh as client-go has them (see those modules)
    loader.KubeConfigLoader.load_from_exec_plugin = load_from_plugin
    loader.KubeConfigLoader._refresh_oidc = refresh_oidc
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        loader.FileOrData._create_temp_file_with_content = _in_memory
    return module


def new_configuration() -> Configuration:
    config_module()  # the client's configuration module, loaded the light way
    cls: type[Configuration] = sys.modules[f"{PACKAGE}.client.configuration"].Configuration
    return cls()


# -- the transport a loaded configuration asks for -------------------------------------


def _env_any(env: Mapping[str, str], *names: str) -> str:
    # the first one set and not empty: upper case wins, as in Go
    return next((env[n] for n in names if env.get(n)), "")


def _as_proxy_url(value: str) -> str:
    # Go reads "proxy.corp:3128" (no scheme, or one it does not know) as http://
    scheme, sep, rest = value.partition("://")
    if sep and rest and scheme.lower() in ("http", "https", "socks5", "socks5h"):
        return value
    return "http://" + value


def _no_proxy_matches(entry: str, host: str, port: str, ip: IPAddress | None) -> bool:
    """Whether one NO_PROXY entry (trimmed, lower case, not "*") exempts host:port."""
    if "/" in entry:
        try:
            return ip is not None and ip in ipaddress.ip_network(entry, strict=False)
        except ValueError:
            return False  # a malformed CIDR exempts nothing
    entry_host, entry_port = entry, ""
    split = re.fullmatch(r"\[(.*)\]:(\d*)|([^:]*):(\d*)", entry)
    if split is not None:
        entry_host = split[1] if split[1] is not None else split[3]
        entry_port = split[2] if split[2] is not None else split[4]
        if not entry_host:
            return False  # ":80": no host, so nothing to match
    if entry_port and entry_port != port:
        return False
    try:
        entry_ip: IPAddress | None = ipaddress.ip_address(entry_host)
    except ValueError:
        entry_ip = None
    if entry_ip is not None:
        return ip is not None and entry_ip == ip
    # "foo.com" exempts foo.com and its subdomains, ".foo.com" and "*.foo.com" only these
    suffix = entry_host[1:] if entry_host.startswith("*.") else entry_host
    if not suffix.startswith("."):
        if host == suffix:
            return True
        suffix = "." + suffix
    return host.endswith(suffix)


def proxy_from_environment(url: str, env: Mapping[str, str]) -> str | None:
    """The proxy Go's ``http.ProxyFromEnvironment`` (golang.org/x/net/http/httpproxy)
    picks for ``url``, which is what client-go uses when the kubeconfig names none:
    HTTPS_PROXY for an https server, HTTP_PROXY for http (each also in lower case, the
    upper-case one first); none for localhost or a loopback address, whatever is set;
    NO_PROXY (or no_proxy) a comma-separated list of ``*``, IP addresses, CIDRs, and
    domains (``foo.com`` matches it and its subdomains, ``.foo.com`` and ``*.foo.com``
    only subdomains), each optionally with ``:port``."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "https":
        value = _env_any(env, "HTTPS_PROXY", "https_proxy")
    elif scheme == "http":
        value = _env_any(env, "HTTP_PROXY", "http_proxy")
    else:
        return None
    host = (parts.hostname or "").lower()
    if not value or not host:
        return None
    try:
        ip: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if host == "localhost" or (ip is not None and ip.is_loopback):
        return None
    try:
        port = str(parts.port or (443 if scheme == "https" else 80))
    except ValueError:
        return None
    for entry in _env_any(env, "NO_PROXY", "no_proxy").split(","):
        entry = entry.strip().lower()
        if entry == "*" or (entry and _no_proxy_matches(entry, host, port, ip)):
            return None
    return _as_proxy_url(value)


def settle_transport(cfg: Configuration, env: Mapping[str, str]) -> None:
    """Check a loaded configuration's TLS and proxy settings, as client-go would, and
    settle its proxy: the kubeconfig's ``proxy-url``, else the environment's. Raises
    ValueError at start-up for what client-go refuses (or our client cannot do), rather
    than every request failing later."""
    if not cfg.verify_ssl and cfg.ssl_ca_cert:
        # client-go: a CA that would not be checked is a mistake, not a choice
        raise ValueError(
            "kubeconfig cluster: specifying a root certificates file with the insecure "
            "flag is not allowed (insecure-skip-tls-verify with certificate-authority)"
        )
    proxy = str(cfg.proxy) if cfg.proxy else proxy_from_environment(str(cfg.host), env)
    if proxy and not proxy.lower().startswith(("http://", "https://")):
        where = "kubeconfig proxy-url" if cfg.proxy else "proxy from the environment"
        raise ValueError(f"{where} {redact(proxy)!r}: only http:// and https:// proxies")
    cfg.proxy = proxy or None
