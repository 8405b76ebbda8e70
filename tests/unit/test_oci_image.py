"""hack/oci_image.py: the archive the real node's images are imported from is a valid
OCI image layout, every descriptor matching its blob, and the same input gives the same
bytes. (Importing it into a real containerd is the node's own test.)"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from hack.oci_image import image_archive, layer_from_files


def test_the_archive_is_an_oci_layout_whose_descriptors_match(tmp_path: Path) -> None:
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF not really")
    layer = layer_from_files({"/bin/pause": binary})
    archive = image_archive("example.org/pause:3.10", layer, ["/bin/pause"], user="65535")
    assert archive == image_archive("example.org/pause:3.10", layer, ["/bin/pause"], user="65535")

    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}

    def blob(desc: dict[str, object]) -> bytes:
        data = files["blobs/sha256/" + str(desc["digest"]).split(":")[1]]
        assert "sha256:" + hashlib.sha256(data).hexdigest() == desc["digest"]
        assert len(data) == desc["size"]
        return data

    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "example.org/pause:3.10"
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == "3.10"
    manifest = json.loads(blob(entry))
    config = json.loads(blob(manifest["config"]))
    assert config["config"]["Entrypoint"] == ["/bin/pause"] and config["config"]["User"] == "65535"
    (layer_desc,) = manifest["layers"]
    assert config["rootfs"]["diff_ids"] == [layer_desc["digest"]], "uncompressed: digest = diff ID"

    with tarfile.open(fileobj=io.BytesIO(blob(layer_desc))) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert members["bin"].isdir()
        assert members["bin/pause"].mode == 0o755 and members["bin/pause"].mtime == 0
        assert tar.extractfile("bin/pause").read() == binary.read_bytes()  # type: ignore[union-attr]
