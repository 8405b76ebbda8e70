"""The kubeconfig's transport settings reach the connection: `proxy-url` (an HTTP proxy,
tunnelled with CONNECT), `tls-server-name` (the name the server's certificate is
verified against, and sent as SNI) and the CA, against a TLS stand-in apiserver whose
certificate names only `kubernetes.internal`."""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from controller import errors
from controller.client.api import KubeApi, load_configuration
from tests.unit.controller.conftest import self_signed, serving

POD = "/api/v1/namespaces/ns/pods/a"
NAME = "kubernetes.internal"


@asynccontextmanager
async def connect_proxy(tunnels: list[str]) -> AsyncIterator[str]:
    """An HTTP proxy that only tunnels (CONNECT), recording each target."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
        if method != "CONNECT":
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            writer.close()
            return
        tunnels.append(target)
        host, port = target.rsplit(":", 1)
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


def kubeconfig(tmp_path: Path, server: str, ca: bytes, **cluster: Any) -> Path:
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca).decode(),
                    **cluster,
                },
            }
        ],
        "users": [{"name": "u", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    return path


async def test_proxy_url_and_tls_server_name_reach_the_connection(tmp_path: Path) -> None:
    crt, key = self_signed(tmp_path, "api", san=f"DNS:{NAME}")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(str(crt), str(key))
    sni: list[str | None] = []
    tls.sni_callback = lambda sock, name, ctx: sni.append(name)  # type: ignore[assignment,misc,func-returns-value]

    async def pod(request: web.Request) -> web.Response:
        assert request.headers["Authorization"] == "Bearer t0ken"
        return web.json_response({"metadata": {"name": "a"}})

    tunnels: list[str] = []
    async with serving({POD: pod}, tls=tls) as url, connect_proxy(tunnels) as proxy:
        server = url  # https://127.0.0.1:port: its certificate does not name 127.0.0.1
        settings = {"tls-server-name": NAME, "proxy-url": proxy}
        cfg = await load_configuration(
            str(kubeconfig(tmp_path, server, crt.read_bytes(), **settings))
        )
        api = KubeApi(cfg)
        try:
            got = await api.request("GET", POD)
        finally:
            await api.close()
        assert got["metadata"]["name"] == "a"
        assert tunnels == [server.removeprefix("https://")], "through the proxy"
        assert sni and sni[-1] == NAME, "verified as kubernetes.internal"

        # Without tls-server-name the certificate does not match 127.0.0.1: refused.
        plain = await load_configuration(str(kubeconfig(tmp_path, server, crt.read_bytes())))
        api = KubeApi(plain)
        try:
            with pytest.raises(errors.ConnectionFailed, match=r"(?i)certificate|hostname"):
                await api.request("GET", POD)
        finally:
            await api.close()


async def test_a_proxy_scheme_the_client_cannot_speak_is_refused_at_load(tmp_path: Path) -> None:
    crt, _key = self_signed(tmp_path)
    path = kubeconfig(
        tmp_path, "https://127.0.0.1:1", crt.read_bytes(), **{"proxy-url": "socks5://p:1080"}
    )
    with pytest.raises(ValueError, match="only http:// and https:// proxies"):
        await load_configuration(str(path))
