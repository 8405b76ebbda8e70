"""Write an OCI image archive (image layout in a tar) from files, without Docker.

No image registry is reachable here, so the real node's images are made locally and
loaded with ``ctr -n k8s.io images import``: the pause image (one static binary) and, on
top of a root filesystem tarball, the workload image. One uncompressed layer per image
(a layer's digest is then its diff ID), reproducible: fixed times, owners and order.

    python -m hack.oci_image --name registry.k8s.io/pause:3.10 --out pause.tar \\
        --file /pause=path/to/pause --entrypoint /pause --user 65535
    python -m hack.oci_image --name tfjob.local/python:bookworm --out py.tar \\
        --rootfs rootfs.tar --entrypoint /usr/bin/python3
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path

LAYER = "application/vnd.oci.image.layer.v1.tar"
CONFIG = "application/vnd.oci.image.config.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


@dataclass(frozen=True)
class Blob:
    media_type: str
    data: bytes

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def descriptor(self, **extra: object) -> dict[str, object]:
        size = len(self.data)
        return {"mediaType": self.media_type, "digest": self.digest, "size": size, **extra}


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


def image_archive(
    name: str, layer: bytes, entrypoint: list[str], user: str = "", env: list[str] | None = None
) -> bytes:
    """The OCI archive bytes: oci-layout, index.json (naming the image), the blobs."""
    layer_blob = Blob(LAYER, layer)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": entrypoint,
            "User": user,
            "Env": env or ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        },
        "rootfs": {"type": "layers", "diff_ids": [layer_blob.digest]},
    }
    config_blob = Blob(CONFIG, json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": config_blob.descriptor(),
        "layers": [layer_blob.descriptor()],
    }
    manifest_blob = Blob(MANIFEST, json.dumps(manifest, sort_keys=True).encode())
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
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:

        def add(path: str, data: bytes) -> None:
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))

        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", json.dumps(index, sort_keys=True).encode())
        for blob in (layer_blob, config_blob, manifest_blob):
            add(f"blobs/sha256/{blob.digest.split(':', 1)[1]}", blob.data)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--name", required=True, help="the image's full name, e.g. example.org/x:1")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--file", action="append", default=[], help="DEST=SOURCE, repeatable")
    p.add_argument("--rootfs", type=Path, help="a tarball to use as the layer as it is")
    p.add_argument("--entrypoint", action="append", required=True)
    p.add_argument("--user", default="")
    args = p.parse_args(argv)
    if bool(args.file) == bool(args.rootfs):
        p.error("give --file (one or more) or --rootfs, not both")
    if args.rootfs:
        layer = args.rootfs.read_bytes()
    else:
        files = {d: Path(src) for d, _, src in (f.partition("=") for f in args.file)}
        layer = layer_from_files(files)
    args.out.write_bytes(image_archive(args.name, layer, args.entrypoint, args.user))
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
