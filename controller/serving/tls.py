"""The report endpoint's TLS: a certificate and key in files, picked up again when they
change (a rotated Secret, cert-manager's renewal), for the next handshakes.

``context()`` is called per connection; it looks at the files at most every
``check_every`` seconds and builds a new context when their modification time or size
changed. A pair that cannot be loaded (caught mid-rotation, the key not yet matching
the certificate) keeps the previous context and is tried again on the next check.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import structlog

from controller.client.auth.kubeconfig import memory_file
from controller.types import Clock

log = structlog.get_logger("controller.serving.tls")

CHECK_EVERY_SECONDS = 10.0


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert_file), str(key_file))
    return ctx


def memory_context(cert: bytes, key: bytes) -> ssl.SSLContext:
    """A server context for a pair held in memory: OpenSSL reads it from anonymous
    memory files, so a key made at start-up never touches a (read-only) disk."""
    return server_context(Path(memory_file(cert)), Path(memory_file(key)))


class FileCertificate:
    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        clock: Clock,
        *,
        check_every: float = CHECK_EVERY_SECONDS,
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self._clock = clock
        self._check_every = check_every
        self._stamp = self._files_stamp()
        self._ctx = server_context(cert_file, key_file)  # at start-up a bad pair is fatal
        self._checked = clock.monotonic()
        self.reloads = 0

    def _files_stamp(self) -> tuple[object, ...]:
        out: list[object] = []
        for f in (self.cert_file, self.key_file):
            try:
                st = f.stat()
                out += [st.st_mtime_ns, st.st_size, st.st_ino]
            except OSError:
                out += [None, None, None]
        return tuple(out)

    def context(self) -> ssl.SSLContext:
        now = self._clock.monotonic()
        if now - self._checked < self._check_every:
            return self._ctx
        self._checked = now
        stamp = self._files_stamp()
        if stamp == self._stamp:
            return self._ctx
        try:
            ctx = server_context(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError, ValueError) as e:
            log.warning("serving certificate not reloaded", error=str(e))
            return self._ctx
        self._stamp, self._ctx = stamp, ctx
        self.reloads += 1
        log.info("serving certificate reloaded", cert=str(self.cert_file))
        return ctx
