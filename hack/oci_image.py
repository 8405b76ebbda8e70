"""Write an OCI image archive (image layout in a tar) from files, without Docker.

No image registry is reachable here, so the real node's images are made locally and
loaded with ``ctr -n k8s.io images import``: the pause image (one static binary), the
workload image (a root filesystem tarball) and the TensorFlow image (the workload
image's layer, and a second layer with the Python packages). Uncompressed layers (a
layer's digest is then its diff ID), reproducible: fixed times, owners and order.

    python -m hack.oci_image --name registry.k8s.io/pause:3.10 --out pause.tar \\
        --file /pause=path/to/pause --entrypoint /pause --user 65535
    python -m hack.oci_image --name tfjob.local/python:bookworm --out py.tar \\
        --rootfs rootfs.tar --entrypoint /usr/bin/python3
    python -m hack.oci_image --name tfjob.local/tensorflow:2.21.0-bookworm --out tf.tar \\
        --base py.tar --tree /usr/local/lib/python3.11/dist-packages=site \\
        --entrypoint /usr/bin/python3 --env TF_USE_LEGACY_KERAS=1

Layers, bottom first: those of --base (taken from its archive as they are, so an image
built on it shares them in containerd), each --rootfs, the --file layer, the --tree
layer. A big layer is never held in memory: tarballs are hashed and copied from disk,
and the --tree layer is written to a file beside --out first.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

LAYER = "application/vnd.oci.image.layer.v1.tar"
CONFIG = "application/vnd.oci.image.config.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CHUNK = 1 << 20


@dataclass(frozen=True)
class Blob:
    """A blob of the archive, known by digest and size before it is written; its bytes
    come from open(), a stream positioned at its first byte."""

    media_type: str
    digest: str
    size: int
    open: Callable[[], BinaryIO]

    @classmethod
    def of_bytes(cls, media_type: str, data: bytes) -> Blob:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        return cls(media_type, digest, len(data), lambda: io.BytesIO(data))

    @classmethod
    def of_file(cls, media_type: str, path: Path) -> Blob:
        h = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(CHUNK):
                h.update(chunk)
        digest, size = "sha256:" + h.hexdigest(), path.stat().st_size
        return cls(media_type, digest, size, lambda: path.open("rb"))

    def descriptor(self, **extra: object) -> dict[str, object]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size, **extra}


class _Checked:
    """Reads a blob's stream, hashing what passes, so a blob that changed since its
    digest was taken is caught rather than written under the wrong name."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream, self.hash = stream, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.stream.read(n)
        self.hash.update(data)
        return data


def layer_from_files(files: dict[str, Path]) -> bytes:
    """A layer holding each file at its path (parents made), root-owned, times at 0."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        made: set[str] = set()
        for dest in sorted(files):
            parts = dest.strip("/").split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in made:
                    info = tarfile.TarInfo(d)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                    made.add(d)
            data = files[dest].read_bytes()
            info = tarfile.TarInfo("/".join(parts))
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def write_tree_layer(trees: Mapping[str, Path], out: BinaryIO) -> None:
    """A layer holding each directory's content under its destination (its parents
    made): a directory before what it holds, names sorted, root-owned, times at 0,
    modes 0755 for directories and executables and 0644 for other files (whatever the
    umask was), symbolic links kept as links."""
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, copybufsize=CHUNK) as tar:
        made: set[str] = set()

        def directory(name: str) -> None:
            if name not in made:
                info = tarfile.TarInfo(name)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                made.add(name)

        for dest in sorted(trees):
            parts = dest.strip("/").split("/")
            for i in range(1, len(parts) + 1):
                directory("/".join(parts[:i]))
            root = trees[dest]
            for here, dirs, files in os.walk(root):
                rel = Path(here).relative_to(root).as_posix()
                prefix = "/".join(parts) if rel == "." else "/".join([*parts, rel])
                directory(prefix)
                links = [d for d in dirs if os.path.islink(os.path.join(here, d))]
                dirs[:] = sorted(set(dirs) - set(links))  # walked next, in this order
                for name in sorted(files + links):
                    path = os.path.join(here, name)
                    st = os.lstat(path)
                    info = tarfile.TarInfo(f"{prefix}/{name}")
                    if os.path.islink(path):
                        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
                        info.mode = 0o777
                        tar.addfile(info)
                    elif os.path.isfile(path):
                        info.size, info.mode = st.st_size, 0o755 if st.st_mode & 0o111 else 0o644
                        with open(path, "rb") as f:
                            tar.addfile(info, f)
                    else:
                        raise ValueError(f"{path}: neither a file, a directory nor a link")


def base_layers(archive: Path) -> list[Blob]:
    """The layers of an image archive (one this module wrote, or any with uncompressed
    layers), each read from the archive where it lies."""
    with tarfile.open(archive) as tar:

        def member(digest: str) -> tarfile.TarInfo:
            return tar.getmember("blobs/sha256/" + digest.split(":", 1)[1])

        def read(info: tarfile.TarInfo) -> bytes:
            f = tar.extractfile(info)
            assert f is not None, info.name
            return f.read()

        index = json.loads(read(tar.getmember("index.json")))
        manifests = index["manifests"]
        if len(manifests) != 1:
            raise ValueError(f"{archive}: {len(manifests)} images, expected one")
        manifest = json.loads(read(member(manifests[0]["digest"])))
        layers = []
        for desc in manifest["layers"]:
            if desc["mediaType"] != LAYER:
                raise ValueError(f"{archive}: a {desc['mediaType']} layer; only {LAYER} is taken")
            info = member(desc["digest"])
            if info.size != desc["size"]:
                raise ValueError(f"{archive}: {info.name} is {info.size} bytes, not {desc['size']}")

            def opener(offset: int = info.offset_data) -> BinaryIO:
                # Positioned at the blob: the writer reads exactly its size from there.
                f = archive.open("rb")
                f.seek(offset)
                return f

            layers.append(Blob(LAYER, desc["digest"], desc["size"], opener))
    return layers


def write_archive(
    out: BinaryIO,
    name: str,
    layers: list[Blob],
    entrypoint: list[str],
    user: str = "",
    env: list[str] | None = None,
) -> None:
    """The OCI archive: oci-layout, index.json (naming the image), the blobs."""
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": entrypoint, "User": user, "Env": env or [PATH_ENV]},
        "rootfs": {"type": "layers", "diff_ids": [layer.digest for layer in layers]},
    }
    config_blob = Blob.of_bytes(CONFIG, json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": config_blob.descriptor(),
        "layers": [layer.descriptor() for layer in layers],
    }
    manifest_blob = Blob.of_bytes(MANIFEST, json.dumps(manifest, sort_keys=True).encode())
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
    index = {
        "schemaVersion": 2,
        "manifests": [
            manifest_blob.descriptor(
                annotations={
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": tag,
                },
                platform={"architecture": "amd64", "os": "linux"},
            )
        ],
    }
    with tarfile.open(fileobj=out, mode="w", copybufsize=CHUNK) as tar:

        def add(path: str, blob: Blob) -> None:
            info = tarfile.TarInfo(path)
            info.size, info.mode = blob.size, 0o644
            with blob.open() as stream:
                checked = _Checked(stream)
                tar.addfile(info, checked)  # type: ignore[arg-type]
            if "sha256:" + checked.hash.hexdigest() != blob.digest:
                raise ValueError(f"{path}: changed since its digest was taken")

        add("oci-layout", Blob.of_bytes("", b'{"imageLayoutVersion":"1.0.0"}'))
        add("index.json", Blob.of_bytes("", json.dumps(index, sort_keys=True).encode()))
        written: set[str] = set()
        for blob in (*layers, config_blob, manifest_blob):
            if blob.digest not in written:  # the same layer twice is one blob
                add(f"blobs/sha256/{blob.digest.split(':', 1)[1]}", blob)
                written.add(blob.digest)


def image_archive(
    name: str, layer: bytes, entrypoint: list[str], user: str = "", env: list[str] | None = None
) -> bytes:
    """The archive of a one-layer image, as bytes (small images)."""
    out = io.BytesIO()
    write_archive(out, name, [Blob.of_bytes(LAYER, layer)], entrypoint, user, env)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--name", required=True, help="the image's full name, e.g. example.org/x:1")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--base", type=Path, help="an image archive whose layers go first")
    p.add_argument(
        "--rootfs",
        type=Path,
        action="append",
        default=[],
        help="a tarball to use as a layer as it is, repeatable",
    )
    p.add_argument("--file", action="append", default=[], help="DEST=SOURCE, repeatable: one layer")
    p.add_argument(
        "--tree",
        action="append",
        default=[],
        help="DEST=DIR, repeatable: one layer with each DIR's content at DEST",
    )
    p.add_argument("--entrypoint", action="append", required=True)
    p.add_argument("--user", default="")
    p.add_argument("--env", action="append", default=[], help=f"KEY=VALUE, after {PATH_ENV}")
    args = p.parse_args(argv)
    if not (args.base or args.rootfs or args.file or args.tree):
        p.error("no layers: give --base, --rootfs, --file or --tree")
    layers = base_layers(args.base) if args.base else []
    layers += [Blob.of_file(LAYER, rootfs) for rootfs in args.rootfs]
    if args.file:
        files = {d: Path(src) for d, _, src in (f.partition("=") for f in args.file)}
        layers.append(Blob.of_bytes(LAYER, layer_from_files(files)))
    tree_file = args.out.with_name(args.out.name + ".layer")
    try:
        if args.tree:
            trees = {d: Path(src) for d, _, src in (t.partition("=") for t in args.tree)}
            with tree_file.open("wb") as f:
                write_tree_layer(trees, f)
            layers.append(Blob.of_file(LAYER, tree_file))
        with args.out.open("wb") as out:
            write_archive(out, args.name, layers, args.entrypoint, args.user, [PATH_ENV, *args.env])
    finally:
        tree_file.unlink(missing_ok=True)
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
