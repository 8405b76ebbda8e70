#!/usr/bin/env bash
# hack/run-check.sh run|run-tf — the README's command run as a newcomer runs it, bounded:
# `make run` (or `make run-tf`) against a cluster directory of its own, brought up from
# nothing and taken down afterwards, whatever the outcome. Exits with the command's
# status, so CI fails when the README's first command does (make test runs `run`,
# make e2e-tf runs `run-tf`).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
target=${1:?usage: hack/run-check.sh run|run-tf}
case "$target" in
  run) limit=${RUN_CHECK_TIMEOUT:-900} ;;
  run-tf) limit=${RUN_CHECK_TIMEOUT:-1800} ;;
  *) echo "usage: hack/run-check.sh run|run-tf" >&2; exit 2 ;;
esac
log() { echo "[run-check $(date +%H:%M:%S)] $*" >&2; }
export TFJOB_CLUSTER_DIR=${RUN_CHECK_CLUSTER_DIR:-$REPO/.cluster-$target-check}
down() { PYTHON=${PYTHON:-} hack/cluster.sh down >/dev/null 2>&1 || true; }
# a directory left by an earlier, interrupted check: from nothing, as a newcomer starts
down
rm -rf "$TFJOB_CLUSTER_DIR"
trap down EXIT
log "make $target in $TFJOB_CLUSTER_DIR (at most ${limit}s)"
t0=$(date +%s)
set +e
timeout --signal=INT --kill-after=30 "$limit" make --no-print-directory "$target"
rc=$?
set -e
took=$(($(date +%s) - t0))
if [[ $rc -eq 0 ]]; then
  log "make $target passed in ${took}s"
elif [[ $rc -eq 124 ]]; then
  log "make $target did not finish within ${limit}s"
else
  log "make $target failed ($rc) after ${took}s"
fi
exit "$rc"
