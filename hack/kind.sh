#!/usr/bin/env bash
# The controller on a kind cluster, for those who have Docker (and a registry for kind's
# node image): up | load | deploy | down.
#   up      create the cluster (kind built from its Go module, cached like the others)
#   load    build the image (config/manager/Dockerfile) and load it into the nodes
#   deploy  kubectl apply -k config/default, wait for the rollout, run a sample to Succeeded
#   down    delete the cluster
#   e2e     up, load, deploy, then the cluster test suite against the kind cluster
#           (TFJOB_TEST_KUBECONFIG; tests that need the local cluster's kwok nodes or
#           processes are deselected) with the deployed controller scaled to 0 meanwhile
# Without Docker it says so in one line and exits 1; nothing else needs it.
set -euo pipefail

KIND_VERSION=${KIND_VERSION:-v0.33.0}
NAME=${KIND_CLUSTER_NAME:-tfjob}
IMAGE=${IMAGE:-tfjob-controller:latest}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CACHE_ROOT=${TFJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tfjob-controller}
KIND="$CACHE_ROOT/kind-$KIND_VERSION/bin/kind"

log() { printf '[kind %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

need_docker() {
  if ! command -v docker >/dev/null 2>&1; then
    echo "hack/kind.sh: Docker is not installed; kind runs its nodes as Docker containers" >&2
    exit 1
  fi
  if ! docker info >/dev/null 2>&1; then
    echo "hack/kind.sh: Docker is installed but its daemon is not reachable (docker info failed)" >&2
    exit 1
  fi
}

build_kind() {
  [[ -x "$KIND" ]] && return
  command -v go >/dev/null 2>&1 || { echo "hack/kind.sh: no Go toolchain to build kind" >&2; exit 1; }
  log "building kind $KIND_VERSION from its Go module"
  mkdir -p "$(dirname "$KIND")"
  GOBIN="$(dirname "$KIND")" go install "sigs.k8s.io/kind@$KIND_VERSION"
}

kctl() { kubectl --context "kind-$NAME" "$@"; }

case "${1:-}" in
  build-kind)
    build_kind
    echo "$KIND"
    ;;
  up)
    need_docker
    build_kind
    if "$KIND" get clusters 2>/dev/null | grep -qx "$NAME"; then
      log "cluster $NAME is up already"
    else
      "$KIND" create cluster --name "$NAME" --config "$HERE/kind-config.yaml" --wait 120s
    fi
    ;;
  load)
    need_docker
    build_kind
    docker build -f "$REPO/config/manager/Dockerfile" -t "$IMAGE" "$REPO"
    "$KIND" load docker-image "$IMAGE" --name "$NAME"
    ;;
  deploy)
    need_docker
    kctl apply -k "$REPO/config/default"
    kctl -n kubeflow rollout status deployment/tfjob-controller --timeout 180s
    kctl create -f "$REPO/config/samples/tfjob-workers.yaml" -n default
    name=$(kctl -n default get tfjobs -o jsonpath='{.items[-1:].metadata.name}')
    log "waiting for tfjob/$name to succeed"
    kctl -n default wait "tfjob/$name" --for=condition=Succeeded --timeout 600s
    ;;
  e2e)
    need_docker
    "$0" up
    "$0" load
    "$0" deploy
    kubeconfig=$(mktemp)
    trap 'rm -f "$kubeconfig"; kctl -n kubeflow scale deployment/tfjob-controller --replicas 1 >/dev/null' EXIT
    "$KIND" get kubeconfig --name "$NAME" >"$kubeconfig"
    # The suite starts controllers of its own: the deployed one would race them.
    kctl -n kubeflow scale deployment/tfjob-controller --replicas 0
    kctl -n kubeflow wait pod -l app.kubernetes.io/name=tfjob-controller --for=delete --timeout 120s
    log "the cluster test suite against kind-$NAME"
    TFJOB_TEST_KUBECONFIG="$kubeconfig" "${PYTHON:-$REPO/.venv/bin/python}" -m pytest -p no:cacheprovider \
      "$REPO/tests/cluster"
    ;;
  down)
    need_docker
    build_kind
    "$KIND" delete cluster --name "$NAME"
    ;;
  *)
    echo "usage: $0 up|load|deploy|e2e|down|build-kind" >&2
    exit 2
    ;;
esac
