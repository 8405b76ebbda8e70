#!/usr/bin/env bash
# The tools an operator's side is tested with, built from their Go modules into a cache
# entry outside the repo: helm (the chart: lint, template, install, upgrade, uninstall)
# and promtool (the alerting rules' unit tests). Prints the bin dir on the last line of
# stdout. About 3 minutes each, cold, on two cores.
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v4.3.2}
# Prometheus 3's Go module versions are v0.3xx.y
PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-v0.316.0}
CACHE_ROOT=${TFJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tfjob-controller}
BIN="$CACHE_ROOT/ops-tools_helm-${HELM_VERSION}_prometheus-${PROMETHEUS_VERSION}/bin"
HERE=$(cd "$(dirname "$0")" && pwd)

log() { printf '[build-ops-tools %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.build-ops-tools.lock"
if ! flock -n 9; then
  log "another build holds $CACHE_ROOT/.build-ops-tools.lock; waiting for it"
  flock 9
fi

if [[ -x "$BIN/helm" && -x "$BIN/promtool" ]]; then
  log "cached: $BIN"
  echo "$BIN"
  exit 0
fi

source "$HERE/build-lib.sh"  # with_heartbeat
# the Go toolchain hack/build-binaries.sh found or installed into the venv
if [[ -n ${VENV:-} && -x "$VENV/bin/go" ]]; then export PATH="$VENV/bin:$PATH"; fi
command -v go >/dev/null || { log "ERROR: no Go on PATH (make binaries installs one)"; exit 1; }
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0
mkdir -p "$BIN"
log "using $(go version)"

# `go install module@version` builds with the module's own go.mod (its replace
# directives refused, which neither has), into GOBIN.
if [[ ! -x "$BIN/helm" ]]; then
  log "helm $HELM_VERSION: downloading modules and building"
  GOBIN="$BIN.tmp" with_heartbeat "helm" go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
  mv "$BIN.tmp/helm" "$BIN/helm"
fi
if [[ ! -x "$BIN/promtool" ]]; then
  log "promtool (prometheus $PROMETHEUS_VERSION): downloading modules and building"
  GOBIN="$BIN.tmp" with_heartbeat "promtool" go install -trimpath \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION" \
    "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"
  mv "$BIN.tmp/promtool" "$BIN/promtool"
fi
rmdir "$BIN.tmp" 2>/dev/null || true
log "helm and promtool in $BIN"
echo "$BIN"
