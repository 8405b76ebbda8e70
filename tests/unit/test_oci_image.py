"""hack/oci_image.py: the archive the real node's images are imported from is a valid
OCI image layout, every descriptor matching its blob, and the same input gives the same
bytes; an image built on another (the TensorFlow image on the workload image) carries
the base's layer byte for byte, so containerd stores it once. (Importing it into a real
containerd is the node's own test.)"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from hack.oci_image import (
    LAYER,
    PATH_ENV,
    Blob,
    base_layers,
    image_archive,
    layer_from_files,
    main,
    write_archive,
)


class Image:
    """An archive read back: its blobs checked against their descriptors."""

    def __init__(self, archive: bytes) -> None:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            self.files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
        assert json.loads(self.files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
        (self.entry,) = json.loads(self.files["index.json"])["manifests"]
        self.manifest = json.loads(self.blob(self.entry))
        self.config = json.loads(self.blob(self.manifest["config"]))
        self.layers = [self.blob(d) for d in self.manifest["layers"]]
        digests = [d["digest"] for d in self.manifest["layers"]]
        assert self.config["rootfs"]["diff_ids"] == digests, "uncompressed: digest = diff ID"

    def blob(self, desc: dict[str, Any]) -> bytes:
        data = self.files["blobs/sha256/" + str(desc["digest"]).split(":")[1]]
        assert "sha256:" + hashlib.sha256(data).hexdigest() == desc["digest"]
        assert len(data) == desc["size"]
        return data


def members(layer: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_the_archive_is_an_oci_layout_whose_descriptors_match(tmp_path: Path) -> None:
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF not really")
    layer = layer_from_files({"/bin/pause": binary})
    archive = image_archive("example.org/pause:3.10", layer, ["/bin/pause"], user="65535")
    assert archive == image_archive("example.org/pause:3.10", layer, ["/bin/pause"], user="65535")
    # What the one-layer archive was before images could have several: the real node's
    # pause and workload images stay the same bytes (containerd sees the same images).
    assert hashlib.sha256(archive).hexdigest() == (
        "8e51dd04ea7c3957f95f60668e6ffcb229b295b6b60c762a38eff5ab67da67f6"
    )

    image = Image(archive)
    assert image.entry["annotations"]["io.containerd.image.name"] == "example.org/pause:3.10"
    assert image.entry["annotations"]["org.opencontainers.image.ref.name"] == "3.10"
    assert image.config["config"]["Entrypoint"] == ["/bin/pause"]
    assert image.config["config"]["User"] == "65535"
    assert image.config["config"]["Env"] == [PATH_ENV]
    (layer_bytes,) = image.layers
    with tarfile.open(fileobj=io.BytesIO(layer_bytes)) as tar:
        found = {m.name: m for m in tar.getmembers()}
        assert found["bin"].isdir()
        assert found["bin/pause"].mode == 0o755 and found["bin/pause"].mtime == 0
        assert tar.extractfile("bin/pause").read() == binary.read_bytes()  # type: ignore[union-attr]


def _site(root: Path, umask_mode: int) -> Path:
    """A package directory as pip leaves it: modes from the umask, times of the moment."""
    site = root / "site"
    (site / "pkg" / "sub").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("x = 1\n")
    (site / "pkg" / "tool").write_text("#!/bin/sh\n")
    (site / "pkg" / "sub" / "data.txt").write_text("data\n")
    (site / "pkg.dist-info").mkdir()
    (site / "pkg.dist-info" / "RECORD").write_text("pkg/__init__.py\n")
    (site / "alias").symlink_to("pkg")  # a link to a directory stays a link
    os.chmod(site / "pkg" / "__init__.py", umask_mode)
    os.chmod(site / "pkg" / "tool", umask_mode | 0o100)
    when = 1_700_000_000 + umask_mode
    for path in site.rglob("*"):
        os.utime(path, (when, when), follow_symlinks=False)
    return site


def test_an_image_on_a_base_keeps_its_layer_and_adds_the_packages(tmp_path: Path) -> None:
    shell = tmp_path / "sh"
    shell.write_bytes(b"#!not a shell")
    base = tmp_path / "base.tar"
    base_layer = layer_from_files({"/bin/sh": shell})
    base.write_bytes(image_archive("example.org/python:1", base_layer, ["/bin/sh"]))

    def build(out: Path, site: Path) -> bytes:
        dest = "/usr/local/lib/python3.11/dist-packages"
        args = ["--name", "example.org/tf:1", "--out", str(out), "--base", str(base)]
        args += ["--tree", f"{dest}={site}", "--entrypoint", "/usr/bin/python3"]
        assert main([*args, "--env", "TF_USE_LEGACY_KERAS=1", "--env", "PYTHONUNBUFFERED=1"]) == 0
        left = [p.name for p in out.parent.iterdir() if p.name.startswith(out.name)]
        assert left == [out.name], "the packages layer's file is removed"
        return out.read_bytes()

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    archive = build(tmp_path / "a" / "tf.tar", _site(tmp_path / "a", 0o600))
    # Another install of the same packages: other modes, other times; the same image.
    assert build(tmp_path / "b" / "tf.tar", _site(tmp_path / "b", 0o664)) == archive

    image, base_image = Image(archive), Image(base.read_bytes())
    assert image.manifest["layers"][0] == base_image.manifest["layers"][0]
    assert image.layers[0] == base_image.layers[0], "the base's layer, byte for byte"
    env = [PATH_ENV, "TF_USE_LEGACY_KERAS=1", "PYTHONUNBUFFERED=1"]
    assert image.config["config"]["Env"] == env
    assert image.config["config"]["Entrypoint"] == ["/usr/bin/python3"]

    found = members(image.layers[1])
    site = "usr/local/lib/python3.11/dist-packages"
    names = list(found)
    assert names[:5] == ["usr", "usr/local", "usr/local/lib", "usr/local/lib/python3.11", site]
    assert all(names.index(n.rsplit("/", 1)[0]) < names.index(n) for n in names[1:]), (
        "parents first"
    )
    assert set(names) == {
        *names[:5],
        *(f"{site}/{p}" for p in ["alias", "pkg", "pkg/__init__.py", "pkg/tool", "pkg/sub"]),
        *(f"{site}/{p}" for p in ["pkg/sub/data.txt", "pkg.dist-info", "pkg.dist-info/RECORD"]),
    }
    assert found[f"{site}/alias"].issym() and found[f"{site}/alias"].linkname == "pkg"
    assert found[f"{site}/pkg"].isdir() and found[f"{site}/pkg"].mode == 0o755
    assert found[f"{site}/pkg/__init__.py"].mode == 0o644
    assert found[f"{site}/pkg/tool"].mode == 0o755
    owners_and_times = {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in found.values()}
    assert owners_and_times == {(0, 0, 0, "", "")}


def test_a_blob_that_changed_after_its_digest_was_taken_is_refused(tmp_path: Path) -> None:
    layer = tmp_path / "layer.tar"
    layer.write_bytes(b"a" * 1024)
    blob = Blob.of_file(LAYER, layer)
    layer.write_bytes(b"b" * 1024)
    with pytest.raises(ValueError, match="changed since its digest was taken"):
        write_archive(io.BytesIO(), "example.org/x:1", [blob], ["/x"])


def test_only_uncompressed_base_layers_are_taken(tmp_path: Path) -> None:
    gz = Blob.of_bytes(LAYER + "+gzip", b"\x1f\x8b not really")
    base = tmp_path / "base.tar"
    with base.open("wb") as f:
        write_archive(f, "example.org/gz:1", [gz], ["/x"])
    with pytest.raises(ValueError, match=r"\+gzip layer"):
        base_layers(base)
