#!/usr/bin/env bash
# Builds what a real node of the local cluster runs (issue: a real kubelet and real
# containers beside the kwok nodes): kubelet from the same k8s.io/kubernetes module as
# the control plane, containerd with its runc shim and ctr, runc with seccomp, and the
# sandbox (pause) image as an OCI archive (<entry>/images/pause.tar), crictl (to take
# the node's pods down cleanly), CoreDNS with only the plugins cluster DNS needs, and the workload image (<entry>/images/workload.tar:
# Debian bookworm minbase with python3, from debootstrap), into a cache entry outside
# the repo. What must come from Debian is installed with apt (root): gcc, pkg-config and
# libseccomp-dev to build runc; containernetworking-plugins for pod networking;
# debootstrap. Prints the bin directory on the last line of stdout.
#
# Why these builds and not Debian's: bookworm's runc 1.1.5 and crun 1.8 do not work
# with containerd 2, and its containerd is 1.6; kubelet must match the apiserver.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.36.3}
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
RUNC_VERSION=${RUNC_VERSION:-v1.4.4}
CRI_TOOLS_VERSION=${CRI_TOOLS_VERSION:-v1.37.0}
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
SUITE=bookworm

HERE=$(cd "$(dirname "$0")" && pwd)
CACHE_ROOT=${TFJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tfjob-controller}
ENTRY="$CACHE_ROOT/node-k8s-${K8S_VERSION}_containerd-${CONTAINERD_VERSION}_runc-${RUNC_VERSION}_crictl-${CRI_TOOLS_VERSION}_coredns-${COREDNS_VERSION}"
BIN="$ENTRY/bin"
WORK="$ENTRY/modules"

log() { printf '[build-node %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

#: the sandbox image containerd is told to use (pause.tar, imported with ctr)
PAUSE_IMAGE=${PAUSE_IMAGE:-registry.k8s.io/pause:3.10}
PAUSE_SRC="$HERE/node/pause"
PAUSE_HASH=$(cat "$PAUSE_SRC/main.go" "$HERE/oci_image.py" | sha256sum | cut -c1-12)
IMAGES="$ENTRY/images"
#: the image real-node tests run their processes in (python3 on Debian minbase)
WORKLOAD_IMAGE=${WORKLOAD_IMAGE:-tfjob.local/python:$SUITE}
WORKLOAD_HASH=$(echo "$SUITE python3 $WORKLOAD_IMAGE" | cat - "$HERE/oci_image.py" | sha256sum | cut -c1-12)

want=(kubelet containerd containerd-shim-runc-v2 ctr runc crictl coredns)
missing=()
for b in "${want[@]}"; do [[ -x "$BIN/$b" ]] || missing+=("$b"); done
[[ "$(cat "$IMAGES/pause.hash" 2>/dev/null)" == "$PAUSE_HASH" ]] || missing+=(pause-image)
[[ "$(cat "$IMAGES/workload.hash" 2>/dev/null)" == "$WORKLOAD_HASH" ]] || missing+=(workload-image)
debs=()
command -v gcc >/dev/null 2>&1 || debs+=(gcc libc6-dev)
command -v pkg-config >/dev/null 2>&1 || debs+=(pkg-config)
[[ -f /usr/include/seccomp.h ]] || debs+=(libseccomp-dev)
[[ -x /usr/lib/cni/bridge ]] || debs+=(containernetworking-plugins)
command -v debootstrap >/dev/null 2>&1 || debs+=(debootstrap)
if [[ ${#missing[@]} -eq 0 && ${#debs[@]} -eq 0 ]]; then
  log "cached: $BIN"
  echo "$BIN"
  exit 0
fi

if [[ ${#debs[@]} -gt 0 ]]; then
  [[ $(id -u) -eq 0 ]] || { log "ERROR: needs root to install ${debs[*]} with apt"; exit 1; }
  log "apt: installing ${debs[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${debs[@]}" >&2 \
    || { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive \
         apt-get install -y -q --no-install-recommends "${debs[@]}" >&2; }
fi

# The control plane's build gives the Go toolchain and the kubernetes module setup
# (its staging modules pinned) that kubelet is built from.
cp_bin=$("$HERE/build-binaries.sh" | tail -1)
if ! command -v go >/dev/null 2>&1; then export PATH="${VENV:-$HERE/../.venv}/bin:$PATH"; fi
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
mkdir -p "$BIN" "$WORK"

source "$HERE/build-lib.sh"  # with_heartbeat, stamp_ldflags, host_mirror, trust_host_cas

# A module's own source tree, writable, to build as the main module (so its replace
# directives and go.sum hold, as in its release builds).
source_of() {
  local mod=$1 dir=$2 src
  if [[ ! -f "$dir/go.mod" ]]; then
    src=$(cd "$WORK" && go mod download -json "$mod" | sed -n 's/.*"Dir": "\([^"]*\)".*/\1/p')
    [[ -n "$src" ]] || { log "ERROR: could not download $mod"; exit 1; }
    rm -rf "$dir"; cp -r "$src" "$dir"; chmod -R u+w "$dir"
  fi
}

start_all=$(date +%s)

# --- kubelet ------------------------------------------------------------------
if [[ ! -x "$BIN/kubelet" ]]; then
  k8s_mod="$(dirname "$cp_bin")/modules/k8s"
  d="$WORK/kubelet"; mkdir -p "$d"
  if [[ ! -f "$d/go.sum" ]]; then
    cp "$k8s_mod/go.mod" "$d/go.mod"
    cat > "$d/tools.go" <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kubelet"
GO
    log "kubelet $K8S_VERSION: resolving modules (go mod tidy)"
    (cd "$d" && with_heartbeat "go mod tidy" go mod tidy)
  fi
  ld=$(stamp_ldflags "$K8S_VERSION")
  (cd "$d" && export CGO_ENABLED=0 && with_heartbeat "kubelet" \
    go build -trimpath -pgo=off -ldflags "$ld" -o "$BIN/kubelet.tmp" k8s.io/kubernetes/cmd/kubelet)
  mv "$BIN/kubelet.tmp" "$BIN/kubelet"
fi

# --- containerd, its runc shim, ctr --------------------------------------------
if [[ ! -x "$BIN/containerd" || ! -x "$BIN/containerd-shim-runc-v2" || ! -x "$BIN/ctr" ]]; then
  d="$WORK/containerd"
  source_of "github.com/containerd/containerd/v2@$CONTAINERD_VERSION" "$d"
  ld="-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
  for cmd in containerd containerd-shim-runc-v2 ctr; do
    (cd "$d" && export CGO_ENABLED=0 && with_heartbeat "$cmd" go build -mod=mod -trimpath \
      -tags "no_btrfs no_devmapper no_zfs" -ldflags "$ld" -o "$BIN/$cmd.tmp" "./cmd/$cmd")
    mv "$BIN/$cmd.tmp" "$BIN/$cmd"
  done
fi

# --- runc -----------------------------------------------------------------------
if [[ ! -x "$BIN/runc" ]]; then
  d="$WORK/runc"
  source_of "github.com/opencontainers/runc@$RUNC_VERSION" "$d"
  (cd "$d" && export CGO_ENABLED=1 && with_heartbeat "runc" go build -mod=mod -trimpath -tags seccomp \
    -ldflags "-s -w -X main.version=${RUNC_VERSION#v}" -o "$BIN/runc.tmp" .)
  mv "$BIN/runc.tmp" "$BIN/runc"
fi

# --- the pause image ---------------------------------------------------------------
if [[ "$(cat "$IMAGES/pause.hash" 2>/dev/null)" != "$PAUSE_HASH" ]]; then
  mkdir -p "$IMAGES"
  (cd "$PAUSE_SRC" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$IMAGES/pause" .)
  PY=${PYTHON:-${VENV:-$HERE/../.venv}/bin/python}
  (cd "$HERE/.." && "$PY" -m hack.oci_image --name "$PAUSE_IMAGE" --out "$IMAGES/pause.tar" \
    --file "/pause=$IMAGES/pause" --entrypoint /pause --user 65535 >/dev/null)
  echo "$PAUSE_HASH" > "$IMAGES/pause.hash"
  log "pause image $PAUSE_IMAGE: $IMAGES/pause.tar"
fi

# --- crictl ---------------------------------------------------------------------
if [[ ! -x "$BIN/crictl" ]]; then
  d="$WORK/cri-tools"
  source_of "sigs.k8s.io/cri-tools@$CRI_TOOLS_VERSION" "$d"
  (cd "$d" && export CGO_ENABLED=0 && with_heartbeat "crictl" go build -mod=mod -trimpath \
    -ldflags "-s -w" -o "$BIN/crictl.tmp" ./cmd/crictl)
  mv "$BIN/crictl.tmp" "$BIN/crictl"
fi

# --- CoreDNS: its own main with the few plugins cluster DNS needs ------------------
# (the module's main links all of them, cloud DNS providers included: minutes more)
if [[ ! -x "$BIN/coredns" ]]; then
  d="$WORK/coredns"
  source_of "github.com/coredns/coredns@$COREDNS_VERSION" "$d"
  mkdir -p "$d/cmd/node-dns"
  cat > "$d/cmd/node-dns/main.go" <<'GO'
// CoreDNS for the local cluster's real node: cluster.local from the kubernetes plugin,
// everything else forwarded to the host's resolvers.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	// The order plugins run in (upstream's plugin.cfg order, these only).
	dnsserver.Directives = []string{"bind", "health", "ready", "errors", "log", "cache", "kubernetes", "forward"}
}

func main() { coremain.Run() }
GO
  (cd "$d" && export CGO_ENABLED=0 && with_heartbeat "coredns" go build -mod=mod -trimpath \
    -ldflags "-s -w" -o "$BIN/coredns.tmp" ./cmd/node-dns)
  mv "$BIN/coredns.tmp" "$BIN/coredns"
fi

# --- the workload image ----------------------------------------------------------
if [[ "$(cat "$IMAGES/workload.hash" 2>/dev/null)" != "$WORKLOAD_HASH" ]]; then
  [[ $(id -u) -eq 0 ]] || { log "ERROR: debootstrap needs root"; exit 1; }
  mkdir -p "$IMAGES"
  rootfs=$(mktemp -d "$ENTRY/rootfs.XXXXXX")
  mirror=$(host_mirror)
  log "workload image: debootstrap --variant=minbase $SUITE with python3 (about a minute)"
  bootstrap() {
    debootstrap --variant=minbase --include=python3 "$SUITE" "$rootfs" ${mirror:+"$mirror"} \
      >"$ENTRY/debootstrap.log" 2>&1
  }
  if ! with_heartbeat "debootstrap" bootstrap; then
    tail -20 "$ENTRY/debootstrap.log" >&2
    rm -rf "$rootfs"
    log "ERROR: debootstrap failed (log: $ENTRY/debootstrap.log)"
    exit 1
  fi
  trust_host_cas "$rootfs"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" --numeric-owner -cf "$ENTRY/rootfs.tar" .
  rm -rf "$rootfs"
  PY=${PYTHON:-${VENV:-$HERE/../.venv}/bin/python}
  (cd "$HERE/.." && "$PY" -m hack.oci_image --name "$WORKLOAD_IMAGE" --out "$IMAGES/workload.tar" \
    --rootfs "$ENTRY/rootfs.tar" --entrypoint /usr/bin/python3 >/dev/null)
  rm -f "$ENTRY/rootfs.tar"
  echo "$WORKLOAD_HASH" > "$IMAGES/workload.hash"
  log "workload image $WORKLOAD_IMAGE: $IMAGES/workload.tar ($(du -m "$IMAGES/workload.tar" | cut -f1) MB)"
fi

log "node binaries in $BIN ($(( $(date +%s) - start_all ))s)"
echo "$BIN"
