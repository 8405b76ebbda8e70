"""A TCP fault proxy in front of the kube-apiserver, one per controller replica.

It relays bytes (TLS passes through untouched: the replica still verifies the
apiserver's certificate, which names 127.0.0.1) and, on command, misbehaves the way a
network does:

- ``reset()``: every open connection ends with a TCP RST (watches cut, requests lost);
- ``stall(seconds)``: connections stay open but no byte is forwarded either way, new ones
  included (half-open: the peers see nothing wrong); when the stall ends, the stalled
  connections are reset, as a middlebox that dropped its state would;
- ``latency(seconds, for_seconds)``: every chunk waits before it is forwarded;
- ``partition()`` / ``heal()``: open connections are reset and new ones refused (accepted
  and reset at once) until healed.

Faults apply per proxy, so one replica can be cut off while the other is not.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass, field

from hack.cluster import free_port


@dataclass(eq=False)
class _Conn:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    stalled: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def abort(self) -> None:
        for w in (self.client, self.upstream):
            _rst(w)


def _rst(writer: asyncio.StreamWriter) -> None:
    """Close with RST rather than FIN, like a connection dropped on the wire."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    def __init__(self, name: str, upstream_port: int) -> None:
        self.name = name
        self.upstream_port = upstream_port
        self.port = free_port()
        self.partitioned = False
        self._stalled = False
        self._latency = 0.0
        self._conns: set[_Conn] = set()
        self._server: asyncio.Server | None = None
        self._unstall = asyncio.Event()
        self._unstall.set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.reset()

    # --- commands -----------------------------------------------------------------

    def reset(self) -> int:
        """Reset every open connection; how many there were."""
        conns = list(self._conns)
        for c in conns:
            c.abort()
        self._conns.clear()
        return len(conns)

    async def stall(self, seconds: float) -> None:
        self._stalled = True
        self._unstall.clear()
        for c in self._conns:
            c.stalled = True
        try:
            await asyncio.sleep(seconds)
        finally:
            self._stalled = False
            for c in [c for c in self._conns if c.stalled]:
                c.abort()
                self._conns.discard(c)
            self._unstall.set()

    async def latency(self, seconds: float, for_seconds: float) -> None:
        self._latency = seconds
        try:
            await asyncio.sleep(for_seconds)
        finally:
            self._latency = 0.0

    def partition(self) -> None:
        self.partitioned = True
        self.reset()

    def heal(self) -> None:
        self.partitioned = False

    # --- relaying -----------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.partitioned:
            _rst(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            _rst(writer)  # the apiserver is down (restarting): refused, as it would be
            return
        conn = _Conn(writer, up_writer, stalled=self._stalled)
        if self.partitioned:  # partitioned while we connected
            conn.abort()
            return
        self._conns.add(conn)
        conn.tasks = [
            asyncio.create_task(self._pump(conn, reader, up_writer)),
            asyncio.create_task(self._pump(conn, up_reader, writer)),
        ]
        await asyncio.gather(*conn.tasks, return_exceptions=True)
        self._conns.discard(conn)
        conn.abort()

    async def _pump(
        self, conn: _Conn, src: asyncio.StreamReader, dst: asyncio.StreamWriter
    ) -> None:
        try:
            while True:
                data = await src.read(65536)
                if not data:
                    with contextlib.suppress(OSError):
                        dst.write_eof()
                    return
                while conn.stalled:
                    # Swallow, never forward: the connection ends when the stall does.
                    await self._unstall.wait()
                    if conn not in self._conns:
                        return
                if self._latency:
                    await asyncio.sleep(self._latency)
                dst.write(data)
                await dst.drain()
        except (OSError, asyncio.IncompleteReadError):
            # One side is gone: so is the other direction.
            for t in conn.tasks:
                if t is not asyncio.current_task():
                    t.cancel()
