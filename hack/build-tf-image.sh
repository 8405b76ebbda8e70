#!/usr/bin/env bash
# Builds the TensorFlow workload image for the real node, tfjob.local/tensorflow:2.21.0-bookworm
# (issue 32): the workload image build-node.sh makes (tfjob.local/python:bookworm, Debian
# bookworm minbase with python3) plus one layer holding tensorflow-cpu, tf_keras and
# their dependencies (hack/node/tf-requirements.txt, pinned and hashed) in
# /usr/local/lib/python3.11/dist-packages, where Debian's python3 finds them.
#
# No Docker and no registry: pip installs the wheels for the image's Python (CPython
# 3.11, manylinux x86_64) into a directory, then hack/oci_image.py writes the archive with
# the workload image's layer copied from its archive as it is, so containerd stores that
# layer once for both images. Cached outside the repo in an entry keyed by the inputs
# (the requirements, the scripts that build it, the base image's digest); the wheels in a
# directory of their own, so a rebuild downloads nothing. Prints the archive's path on
# the last line of stdout. Import it with `ctr -n k8s.io images import <archive>`.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
TF_VERSION=2.21.0
TF_IMAGE=${TF_IMAGE:-tfjob.local/tensorflow:$TF_VERSION-bookworm}
#: where the image's python3 (Debian's 3.11) looks for packages besides its own
SITE=/usr/local/lib/python3.11/dist-packages
CACHE_ROOT=${TFJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tfjob-controller}
WHEELS="$CACHE_ROOT/tf-wheels"
PY=${PYTHON:-${VENV:-$HERE/../.venv}/bin/python}

log() { printf '[build-tf-image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
source "$HERE/build-lib.sh"  # with_heartbeat
mb() { echo "$(( $(du -sb "$@" | awk '{s += $1} END {print s}') / 1000000 )) MB"; }

start_all=$(date +%s)
cd "$HERE/.."  # where the Makefile runs us (VENV may be relative), for python -m hack.*
# The base: build-node.sh's workload image (built there when missing; else it only
# prints where its cache entry is), or BASE_IMAGE, an archive of it made elsewhere.
if [[ -z ${BASE_IMAGE:-} ]]; then
  node_bin=$(VENV=${VENV:-$HERE/../.venv} "$HERE/build-node.sh" | tail -1)
  BASE_IMAGE="$(dirname "$node_bin")/images/workload.tar"
fi
BASE=$BASE_IMAGE
[[ -f $BASE ]] || { log "ERROR: no workload image at $BASE"; exit 1; }
base_digest=$(tar --occurrence=1 -xOf "$BASE" index.json \
  | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["manifests"][0]["digest"])')

KEY=$( { echo "$TF_IMAGE $SITE $base_digest"
         cat "$HERE/node/tf-requirements.txt" "$HERE/tf_requirements.py" "$HERE/oci_image.py" \
             "$HERE/build-tf-image.sh"; } \
       | sha256sum | cut -c1-12)
ENTRY="$CACHE_ROOT/tf-image-$TF_VERSION-$KEY"
ARCHIVE="$ENTRY/tensorflow.tar"
if [[ -f $ARCHIVE ]]; then
  log "cached: $ARCHIVE ($(mb "$ARCHIVE"), $(( $(date +%s) - start_all ))s)"
  echo "$ARCHIVE"
  exit 0
fi

mkdir -p "$ENTRY" "$WHEELS"
stage=$(mktemp -d "$ENTRY/stage.XXXXXX")
trap 'rm -rf "$stage" "$ARCHIVE.tmp" "$ARCHIVE.tmp.layer"' EXIT

log "$TF_IMAGE on $base_digest: wheels into $WHEELS"
with_heartbeat "wheels" "$PY" -m hack.tf_requirements fetch "$WHEELS" >&2
log "wheel cache: $(mb "$WHEELS"/*.whl)"
with_heartbeat "pip install" "$PY" -m hack.tf_requirements install "$WHEELS" "$stage/site" >&2
# pip's console scripts name this machine's interpreter; the image runs python3 -m.
rm -rf "$stage/site/bin"
# Byte code now, not in every container at its first import (a few thousand modules):
# hash-based (unchecked) .pyc files, as the layer's times are all 0 and the image never
# changes, naming the files where the image has them. Any CPython 3.11 writes the same
# format as the image's. A few files are not Python 3 (test data) and are left as they are.
compile_site() {
  "$PY" -m compileall -q -j 0 --invalidation-mode unchecked-hash -s "$stage/site" -p "$SITE" \
    "$stage/site" >"$stage/compileall.log" 2>&1 || true
}
with_heartbeat "byte code" compile_site
log "byte code: $(find "$stage/site" -name '*.pyc' | wc -l) modules," \
  "$(grep -c '^\*\*\* Error compiling' "$stage/compileall.log" || true) files not Python 3"
log "installed: $(mb "$stage/site")"
with_heartbeat "archive" "$PY" -m hack.oci_image --name "$TF_IMAGE" --out "$ARCHIVE.tmp" \
  --base "$BASE" --tree "$SITE=$stage/site" --entrypoint /usr/bin/python3 \
  --env TF_USE_LEGACY_KERAS=1 --env PYTHONUNBUFFERED=1 >/dev/null
mv "$ARCHIVE.tmp" "$ARCHIVE"

# Older entries (other inputs) are 2 GB each and never used again.
for old in "$CACHE_ROOT"/tf-image-*; do
  if [[ $old != "$ENTRY" && -d $old ]]; then log "removing the stale $old"; rm -rf "$old"; fi
done
log "$TF_IMAGE: $ARCHIVE ($(mb "$ARCHIVE"), $(( $(date +%s) - start_all ))s)"
echo "$ARCHIVE"
