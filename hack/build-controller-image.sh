#!/usr/bin/env bash
# The controller's image for the real node, tfjob.local/tfjob-controller:dev, without
# Docker: what config/manager/Dockerfile builds (the locked dependencies and the
# project's wheel, run as user 65532), on the workload image build-node.sh makes
# (Debian bookworm minbase with its python3, 3.11). The packages go into one directory,
# /opt/tfjob-controller, on python3's path (PYTHONPATH), byte-compiled ahead, since the
# root filesystem is read-only in the pod.
#
# pip installs the locked wheels for the image's Python (CPython 3.11, manylinux x86_64,
# hashes required) and the project's wheel into a directory; hack/oci_image.py writes
# the archive, the workload image's layer copied as it is. Cached outside the repo in an
# entry keyed by every input (the lock, the project's sources, these scripts, the base's
# digest): a change to the code builds a new one (about 30 s). Prints the archive's path
# on the last line of stdout; import it with `ctr -n k8s.io images import <archive>`, or
# `hack/cluster.sh up --real-node --controller-image`.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
IMAGE=${CONTROLLER_IMAGE:-tfjob.local/tfjob-controller:dev}
SITE=/opt/tfjob-controller
CACHE_ROOT=${TFJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tfjob-controller}
PY=${PYTHON:-${VENV:-$REPO/.venv}/bin/python}

log() { printf '[build-controller-image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
source "$HERE/build-lib.sh"  # with_heartbeat
mb() { echo "$(( $(du -sb "$@" | awk '{s += $1} END {print s}') / 1000000 )) MB"; }

start_all=$(date +%s)
cd "$REPO"
if [[ -z ${BASE_IMAGE:-} ]]; then
  node_bin=$(VENV=${VENV:-$REPO/.venv} "$HERE/build-node.sh" | tail -1)
  BASE_IMAGE="$(dirname "$node_bin")/images/workload.tar"
fi
[[ -f $BASE_IMAGE ]] || { log "ERROR: no workload image at $BASE_IMAGE"; exit 1; }
base_digest=$(tar --occurrence=1 -xOf "$BASE_IMAGE" index.json \
  | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["manifests"][0]["digest"])')

KEY=$( { echo "$IMAGE $SITE $base_digest"
         cat config/manager/requirements.lock pyproject.toml README.md \
             "$HERE/oci_image.py" "$HERE/build-controller-image.sh"
         find controller reconcile tfjob_controller -name '*.py' -o -name '*.typed' \
           | LC_ALL=C sort | xargs cat; } \
       | sha256sum | cut -c1-12)
ENTRY="$CACHE_ROOT/controller-image-$KEY"
ARCHIVE="$ENTRY/tfjob-controller.tar"
if [[ -f $ARCHIVE ]]; then
  log "cached: $ARCHIVE ($(mb "$ARCHIVE"))"
  echo "$ARCHIVE"
  exit 0
fi

mkdir -p "$ENTRY"
stage=$(mktemp -d "$ENTRY/stage.XXXXXX")
trap 'rm -rf "$stage" "$ARCHIVE.tmp" "$ARCHIVE.tmp.layer"' EXIT

log "$IMAGE on $base_digest: the locked packages"
with_heartbeat "dependencies" "$PY" -m pip install --quiet --disable-pip-version-check \
  --target "$stage/site" --require-hashes -r config/manager/requirements.lock \
  --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 --abi abi3 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 >&2
rm -rf "$stage/site/bin"
log "the project's wheel"
with_heartbeat "wheel" "$PY" -m pip wheel --quiet --disable-pip-version-check --no-deps \
  --wheel-dir "$stage/wheel" . >&2
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps --target "$stage/site" \
  "$stage"/wheel/*.whl >&2
# console scripts name this machine's interpreter; the image runs python3 -m
rm -rf "$stage/site/bin"
"$PY" -m compileall -q -j 0 --invalidation-mode unchecked-hash -s "$stage/site" -p "$SITE" \
  "$stage/site" >"$stage/compileall.log" 2>&1 || true
log "installed: $(mb "$stage/site")"
"$PY" -m hack.oci_image --name "$IMAGE" --out "$ARCHIVE.tmp" --base "$BASE_IMAGE" \
  --tree "$SITE=$stage/site" --user 65532:65532 \
  --entrypoint /usr/bin/python3 --entrypoint=-m --entrypoint tfjob_controller \
  --env "PYTHONPATH=$SITE" --env PYTHONUNBUFFERED=1 --env PYTHONDONTWRITEBYTECODE=1 >/dev/null
mv "$ARCHIVE.tmp" "$ARCHIVE"

for old in "$CACHE_ROOT"/controller-image-*; do
  if [[ $old != "$ENTRY" && -d $old ]]; then rm -rf "$old"; fi
done
log "$IMAGE: $ARCHIVE ($(mb "$ARCHIVE"), $(( $(date +%s) - start_all ))s)"
echo "$ARCHIVE"
