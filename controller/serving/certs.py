"""A CA and a serving certificate the controller makes and keeps in a Secret.

For an endpoint in the cluster with no certificate given: the Secret (keys ``ca.crt``,
``ca.key``, ``tls.crt``, ``tls.key``) is shared by the controller's replicas, so the
one a Service sends a client to serves a certificate the client's CA bundle verifies.

``sync()`` reads the Secret and, when it is missing, or its serving certificate expires
within ``renew_before`` or does not name every address in ``hosts``, writes a new one:
the first replica to write wins (a create that finds the Secret there, or an update
that conflicts, reads it again and uses what the winner wrote). A new serving
certificate is signed by the Secret's CA, so pods that trust the CA trust it too; the
CA (ten years) is made once and only replaced by deleting the Secret. Each replica then
writes the pair to files in ``workdir`` for the TLS context
(controller.serving.tls.FileCertificate re-reads changed files) and hands the CA to
``on_ca`` (the bundle in job namespaces). ``run`` syncs every ``check_every`` seconds,
so a replica picks up a certificate another one renewed.

Keys are ECDSA P-256: small certificates, fast handshakes.

The files go to a directory made fresh for this process (``private_dir``: mode 0700,
ours), inside the one given: a shared temporary directory, or the Deployment's
emptyDir (which the kubelet makes world-writable). Each file is written to a name made
with O_EXCL and O_NOFOLLOW, at its mode from the start, then renamed over the old one:
nothing planted there beforehand is followed or reused.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import datetime as dt
import ipaddress
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio
import structlog
from anyio.abc import TaskStatus

from controller import errors
from controller.types import JSON

log = structlog.get_logger("controller.serving.certs")

CA_DAYS = 3650
CERT_DAYS = 365
RENEW_BEFORE = dt.timedelta(days=30)
CHECK_EVERY_SECONDS = 3600.0
KEYS = ("ca.crt", "ca.key", "tls.crt", "tls.key")


class Secrets(Protocol):
    async def get(self, namespace: str, name: str) -> JSON | None: ...

    async def create(self, namespace: str, body: Mapping[str, Any]) -> JSON: ...

    async def replace(self, namespace: str, name: str, body: Mapping[str, Any]) -> JSON: ...


@dataclass(frozen=True, slots=True)
class Pair:
    ca_crt: bytes
    ca_key: bytes
    tls_crt: bytes
    tls_key: bytes


class SecretCertificate:
    def __init__(
        self,
        secrets: Secrets,
        namespace: str,
        name: str,
        hosts: Sequence[str],
        workdir: Path,
        *,
        now: Callable[[], dt.datetime],
        on_ca: Callable[[str], None] | None = None,
        renew_before: dt.timedelta = RENEW_BEFORE,
        check_every: float = CHECK_EVERY_SECONDS,
    ) -> None:
        self._secrets = secrets
        self.namespace = namespace
        self.name = name
        self.hosts = tuple(hosts)
        self.workdir = workdir
        self._now = now
        self._on_ca = on_ca
        self.renew_before = renew_before
        self.check_every = check_every
        self.cert_file = workdir / "tls.crt"
        self.key_file = workdir / "tls.key"
        self.ca_file = workdir / "ca.crt"
        self.writes = 0

    async def sync(self) -> Pair:
        """The Secret's pair, renewed first when it needs to be; written to the files."""
        for _ in range(5):
            secret = await self._secrets.get(self.namespace, self.name)
            pair = _read(secret)
            why = self._stale(pair)
            if why is None:
                assert pair is not None
                self._install(pair)
                return pair
            fresh = _renewed(pair, self.hosts, self._now(), why)
            try:
                await self._write(secret, fresh)
            except (errors.AlreadyExists, errors.Conflict):
                continue  # another replica wrote first: use its
            log.info("serving certificate written", secret=f"{self.namespace}/{self.name}", why=why)
            self.writes += 1
            self._install(fresh)
            return fresh
        raise RuntimeError(f"secret {self.namespace}/{self.name}: kept changing under us")

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await anyio.sleep(self.check_every)
            try:
                await self.sync()
            except (errors.ApiError, RuntimeError, ValueError) as e:
                log.warning("serving certificate not checked", error=str(e))

    def _stale(self, pair: Pair | None) -> str | None:
        if pair is None:
            return "missing"
        from cryptography import x509

        try:
            cert = x509.load_pem_x509_certificate(pair.tls_crt)
            x509.load_pem_x509_certificate(pair.ca_crt)
        except ValueError:
            return "unreadable"
        if cert.not_valid_after_utc - self.renew_before <= self._now():
            return "expiring"
        if not set(self.hosts) <= _names(cert):
            return "hosts changed"
        return None

    async def _write(self, secret: JSON | None, pair: Pair) -> None:
        data = {
            "ca.crt": pair.ca_crt,
            "ca.key": pair.ca_key,
            "tls.crt": pair.tls_crt,
            "tls.key": pair.tls_key,
        }
        encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
        if secret is None:
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "data": encoded,
            }
            await self._secrets.create(self.namespace, body)
            return
        # the resourceVersion read: a replica that renewed meanwhile makes this conflict
        body = {**secret, "data": encoded}
        await self._secrets.replace(self.namespace, self.name, body)

    def _install(self, pair: Pair) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        _write_if_changed(self.ca_file, pair.ca_crt, 0o644)
        _write_if_changed(self.key_file, pair.tls_key, 0o600)
        _write_if_changed(self.cert_file, pair.tls_crt, 0o644)
        if self._on_ca is not None:
            self._on_ca(pair.ca_crt.decode())


def private_dir(parent: Path | None) -> Path:
    """A directory made now for this process's files, mode 0700, inside ``parent`` (the
    system's temporary directory for None), removed when the process exits. A
    ``parent`` that is a link, or not a directory, is refused."""
    if parent is not None:
        parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = parent.lstat()
        if not stat.S_ISDIR(st.st_mode):
            raise ValueError(f"{parent}: not a directory (a link is not followed)")
    made = Path(tempfile.mkdtemp(prefix="tfjob-tls-", dir=parent))
    atexit.register(shutil.rmtree, made, ignore_errors=True)
    return made


def _write_if_changed(path: Path, data: bytes, mode: int) -> None:
    try:
        if not path.is_symlink() and path.read_bytes() == data:
            return
    except OSError:
        pass
    tmp = path.with_name(f".{path.name}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()  # a leftover, or something planted: never written through
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # the umask may have taken bits the mode asks for
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    tmp.replace(path)  # whole or not at all, for a reader checking it meanwhile


def _read(secret: JSON | None) -> Pair | None:
    if secret is None:
        return None
    data = secret.get("data") or {}
    try:
        got = [base64.b64decode(data[k], validate=True) for k in KEYS]
    except (KeyError, ValueError, TypeError):
        return None
    return Pair(*got)


def _names(cert: Any) -> set[str]:
    from cryptography import x509

    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    ips = {str(i) for i in san.get_values_for_type(x509.IPAddress)}
    return ips | set(san.get_values_for_type(x509.DNSName))


def self_signed(hosts: Sequence[str], now: dt.datetime, ca_name: str) -> Pair:
    """A CA of its own (named ``ca_name``) and a serving certificate for ``hosts`` it
    signed."""
    return _renewed(None, hosts, now, "missing", ca_name)


def _renewed(
    pair: Pair | None,
    hosts: Sequence[str],
    now: dt.datetime,
    why: str,
    ca_name: str = "tfjob-controller progress CA",
) -> Pair:
    """A new serving certificate, signed by ``pair``'s CA unless there is no usable one."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ca_crt = ca_key = None
    if pair is not None and why != "unreadable":
        try:
            ca_crt = x509.load_pem_x509_certificate(pair.ca_crt)
            ca_key = serialization.load_pem_private_key(pair.ca_key, None)
        except (ValueError, TypeError):
            ca_crt = ca_key = None
    if ca_crt is None or not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_crt = _ca_cert(ca_key, now, ca_name)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _serving_cert(key, ca_key, ca_crt, hosts, now)
    pem = serialization.Encoding.PEM
    pkcs8 = serialization.PrivateFormat.PKCS8
    none = serialization.NoEncryption()
    return Pair(
        ca_crt.public_bytes(pem),
        ca_key.private_bytes(pem, pkcs8, none),
        cert.public_bytes(pem),
        key.private_bytes(pem, pkcs8, none),
    )


def _ca_cert(key: Any, now: dt.datetime, ca_name: str) -> Any:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _serving_cert(key: Any, ca_key: Any, ca: Any, hosts: Sequence[str], now: dt.datetime) -> Any:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    ca_ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0][:64])]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CERT_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def _usage(*, ca: bool) -> Any:
    from cryptography import x509

    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )
