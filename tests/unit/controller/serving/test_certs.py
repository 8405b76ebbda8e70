"""The certificate the controller makes: shared through a Secret, renewed before it
expires with the same CA, and whatever another replica wrote first is used."""

from __future__ import annotations

import copy
import datetime as dt
import os
import ssl
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from controller import errors
from controller.serving.certs import SecretCertificate, private_dir
from controller.types import JSON

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Secrets:
    def __init__(self) -> None:
        self.obj: JSON | None = None
        self.rv = 0
        self.calls: list[str] = []
        #: another replica's write, landing just before ours
        self.race: JSON | None = None

    async def get(self, namespace: str, name: str) -> JSON | None:
        self.calls.append("get")
        return copy.deepcopy(self.obj)

    async def create(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        self.calls.append("create")
        if self._raced() or self.obj is not None:
            raise errors.error_from_status(409, {"reason": "AlreadyExists", "message": "exists"})
        return self._store(body)

    async def replace(self, namespace: str, name: str, body: Mapping[str, Any]) -> JSON:
        self.calls.append("replace")
        assert self.obj is not None
        if (
            self._raced()
            or body["metadata"]["resourceVersion"] != self.obj["metadata"]["resourceVersion"]
        ):
            raise errors.error_from_status(409, {"reason": "Conflict", "message": "conflict"})
        return self._store(body)

    def _raced(self) -> bool:
        if self.race is None:
            return False
        self._store(self.race)
        self.race = None
        return True

    def _store(self, body: Mapping[str, Any]) -> JSON:
        self.rv += 1
        self.obj = {
            **copy.deepcopy(dict(body)),
            "metadata": {**body["metadata"], "resourceVersion": str(self.rv)},
        }
        return copy.deepcopy(self.obj)


def made(
    secrets: Secrets, tmp: Path, now: dt.datetime = NOW, hosts: tuple[str, ...] = ("ctl.ns.svc",)
) -> SecretCertificate:
    cas: list[str] = []
    cert = SecretCertificate(
        secrets, "ns", "tls", list(hosts), tmp, now=lambda: now, on_ca=cas.append
    )
    cert.cas = cas  # type: ignore[attr-defined]
    return cert


def leaf(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


async def test_made_once_shared_and_loadable(tmp_path: Path) -> None:
    secrets = Secrets()
    a = made(secrets, tmp_path / "a")
    pair = await a.sync()
    assert secrets.calls == ["get", "create"] and a.writes == 1
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(a.cert_file), str(a.key_file))  # a pair TLS takes
    cert = leaf(a.cert_file)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["ctl.ns.svc"]
    assert a.cas == [pair.ca_crt.decode()]  # type: ignore[attr-defined]
    # a second replica uses the same pair, writing nothing
    b = made(secrets, tmp_path / "b")
    assert await b.sync() == pair and b.writes == 0
    assert (tmp_path / "b" / "tls.crt").read_bytes() == pair.tls_crt


async def test_renewed_before_expiry_with_the_same_ca(tmp_path: Path) -> None:
    secrets = Secrets()
    first = await made(secrets, tmp_path).sync()
    later = NOW + dt.timedelta(days=340)  # within 30 days of the year's end
    again = made(secrets, tmp_path, now=later)
    second = await again.sync()
    assert again.writes == 1 and second.ca_crt == first.ca_crt and second.tls_crt != first.tls_crt
    assert leaf(tmp_path / "tls.crt").not_valid_after_utc > later + dt.timedelta(days=300)
    # a host added is a new certificate too
    more = made(secrets, tmp_path, hosts=("ctl.ns.svc", "10.0.0.7"))
    await more.sync()
    assert more.writes == 1


async def test_another_replicas_write_wins(tmp_path: Path) -> None:
    secrets = Secrets()
    other = Secrets()
    theirs = await made(other, tmp_path / "other").sync()
    assert other.obj is not None
    secrets.race = other.obj
    mine = made(secrets, tmp_path / "mine")
    assert await mine.sync() == theirs and mine.writes == 0
    assert secrets.calls == ["get", "create", "get"]


async def test_an_unreadable_secret_is_made_anew(tmp_path: Path) -> None:
    secrets = Secrets()
    await made(secrets, tmp_path).sync()
    assert secrets.obj is not None
    secrets.obj["data"]["tls.crt"] = "bm90IGEgY2VydA=="  # "not a cert"
    fixed = made(secrets, tmp_path)
    await fixed.sync()
    assert fixed.writes == 1
    leaf(tmp_path / "tls.crt")


def test_the_files_go_to_a_private_directory_of_their_own(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # as a temporary directory, or the kubelet's emptyDir
    one, two = private_dir(shared), private_dir(shared)
    assert one != two and one.parent == two.parent == shared
    st = one.lstat()
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
    link = tmp_path / "link"
    link.symlink_to(shared)
    with pytest.raises(ValueError, match="not a directory"):
        private_dir(link)


async def test_a_planted_link_is_never_written_through(tmp_path: Path) -> None:
    secrets = Secrets()
    victim = tmp_path / "victim"
    victim.write_text("theirs")
    work = tmp_path / "work"
    work.mkdir()
    for name in (".tls.key.tmp", "tls.key"):
        (work / name).symlink_to(victim)
    old = os.umask(0o077)  # the mode is the file's own, whatever the umask
    try:
        await made(secrets, work).sync()
    finally:
        os.umask(old)
    assert victim.read_text() == "theirs"
    key = work / "tls.key"
    assert not key.is_symlink() and b"PRIVATE KEY" in key.read_bytes()
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE((work / "tls.crt").stat().st_mode) == 0o644
