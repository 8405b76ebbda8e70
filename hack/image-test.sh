#!/usr/bin/env bash
# make image-test: the controller's image built with config/manager/Dockerfile and really
# run, on a machine with no container registry.
#   1. a Docker engine: the one that answers `docker info`, else Debian's docker.io
#      installed (root, apt) and a dockerd of our own started, stopped again at the end
#   2. a base image from Debian's packages (debootstrap --variant=minbase with python3
#      and python3-venv, then docker import), cached in the engine; the machine's CA
#      bundle is added when it differs from Debian's, as it does behind a
#      TLS-intercepting proxy, so pip can fetch the locked packages
#   3. the project's image on that base (BASE as a build argument, nothing else changed)
#   4. the container run as the Deployment runs it (user 65532, read-only root
#      filesystem, every capability dropped, no privilege escalation), --network host,
#      against a local cluster of its own (.cluster-image/) through a flattened copy of
#      its kubeconfig; a sample TFJob is taken to Succeeded and /readyz and /metrics are
#      checked (hack/image_check.py; /metrics over HTTPS with a scraper's token, as
#      deployed)
# IMAGE_TEST_BASE=<image> builds on that image instead (pulled if missing: the
# Dockerfile's pinned default, say, where a registry is reachable); IMAGE_TEST_KEEP=1
# leaves the cluster, container and engine running for a look.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CACHE_ROOT=${TFJOB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tfjob-controller}
WORK="$CACHE_ROOT/image-test"
SUITE=${IMAGE_TEST_SUITE:-bookworm}
BASE_TAG=${IMAGE_TEST_BASE:-tfjob-base:$SUITE-minbase}
IMAGE=${IMAGE_TEST_IMAGE:-tfjob-controller:image-test}
CONTAINER=tfjob-image-test
PY=${PYTHON:-$REPO/.venv/bin/python}
export TFJOB_CLUSTER_DIR="$REPO/.cluster-image"
T0=$(date +%s)

log() { printf '[image-test %s +%ss] %s\n' "$(date +%H:%M:%S)" "$(($(date +%s) - T0))" "$*" >&2; }
die() { echo "hack/image-test.sh: $*" >&2; exit 1; }

as_root() {
  [[ $(id -u) == 0 ]] || die "$1 needs root (apt-get install); run as root or install it first"
}

apt_install() {
  as_root "installing $*"
  log "installing $* from Debian's packages"
  mkdir -p "$WORK"
  if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" \
    || { apt-get update -q && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -q --no-install-recommends "$@"; }; } >"$WORK/apt.log" 2>&1; then
    tail -20 "$WORK/apt.log" >&2
    die "apt-get install $* failed (log: $WORK/apt.log)"
  fi
}

source "$HERE/build-lib.sh"  # host_mirror, trust_host_cas

ENGINE_PID=""
cleanup() {
  local rc=$?
  if [[ ${IMAGE_TEST_KEEP:-0} == 1 ]]; then
    log "left running (IMAGE_TEST_KEEP=1): container $CONTAINER, cluster $TFJOB_CLUSTER_DIR${ENGINE_PID:+, dockerd $ENGINE_PID (DOCKER_HOST=$DOCKER_HOST)}"
    exit "$rc"
  fi
  if [[ $rc != 0 ]] && docker inspect "$CONTAINER" >/dev/null 2>&1; then
    log "the container's last log lines:"
    docker logs --tail 40 "$CONTAINER" 2>&1 | sed 's/^/    /' >&2 || true
  fi
  docker rm -f "$CONTAINER" >/dev/null 2>&1 || true
  "$HERE/cluster.sh" down >/dev/null 2>&1 || true
  if [[ -n $ENGINE_PID ]]; then
    log "stopping the dockerd this run started (pid $ENGINE_PID)"
    kill "$ENGINE_PID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$ENGINE_PID" 2>/dev/null || break; sleep 0.2; done
    # dockerd leaves its default network namespace mounted under its exec root
    awk '$5 ~ "^/run/tfjob-image-test/" {print $5}' /proc/self/mountinfo | sort -r \
      | xargs -r -n1 umount -l 2>/dev/null || true
  fi
  exit "$rc"
}
trap cleanup EXIT

start_engine() {
  if docker info >/dev/null 2>&1; then
    log "using the running Docker engine ($(docker info --format '{{.ServerVersion}}'))"
    return
  fi
  { command -v dockerd && command -v docker; } >/dev/null 2>&1 || apt_install docker.io
  as_root "starting dockerd"
  mkdir -p "$WORK/engine"
  export DOCKER_HOST="unix://$WORK/engine/docker.sock"
  # Its own data root (kept, so the base image is built once), exec root and socket:
  # nothing of a system dockerd's is touched.
  dockerd --host "$DOCKER_HOST" --data-root "$WORK/engine/data" \
    --exec-root /run/tfjob-image-test --pidfile "$WORK/engine/dockerd.pid" \
    >"$WORK/engine/dockerd.log" 2>&1 &
  ENGINE_PID=$!
  for _ in $(seq 150); do
    docker info >/dev/null 2>&1 && break
    kill -0 "$ENGINE_PID" 2>/dev/null || { tail -20 "$WORK/engine/dockerd.log" >&2; die "dockerd exited"; }
    sleep 0.2
  done
  docker info >/dev/null 2>&1 || { tail -20 "$WORK/engine/dockerd.log" >&2; die "dockerd did not answer in 30 s"; }
  log "started dockerd $(docker info --format '{{.ServerVersion}} ({{.Driver}}, cgroup v{{.CgroupVersion}})') as pid $ENGINE_PID"
}

build_base() {
  if docker image inspect "$BASE_TAG" >/dev/null 2>&1; then
    log "base image $BASE_TAG is cached"
    return
  fi
  if [[ -n ${IMAGE_TEST_BASE:-} ]]; then
    # A base named by the caller (e.g. the Dockerfile's pinned default, where a registry
    # is reachable) is pulled, not built.
    log "pulling $BASE_TAG"
    docker pull --quiet "$BASE_TAG" >/dev/null || die "cannot pull $BASE_TAG"
    return
  fi
  command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
  as_root "debootstrap"
  local rootfs mirror
  rootfs=$(mktemp -d "$WORK/rootfs.XXXXXX")
  mirror=$(host_mirror)
  log "debootstrap --variant=minbase $SUITE with python3, python3-venv (about a minute)"
  if ! debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$SUITE" "$rootfs" ${mirror:+"$mirror"} >"$WORK/debootstrap.log" 2>&1; then
    tail -20 "$WORK/debootstrap.log" >&2
    rm -rf "$rootfs"
    die "debootstrap failed (log: $WORK/debootstrap.log)"
  fi
  trust_host_cas "$rootfs"
  local bundle=/etc/ssl/certs/ca-certificates.crt
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  # pip takes its CA bundle from certifi unless told otherwise; Debian's bundle is the
  # one that carries the machine's additions.
  tar -C "$rootfs" -c . | docker import \
    --change "ENV PIP_CERT=$bundle" --change 'CMD ["/bin/bash"]' - "$BASE_TAG" >/dev/null
  rm -rf "$rootfs"
  log "base image $BASE_TAG: $(docker image inspect "$BASE_TAG" --format '{{.Size}}' | awk '{printf "%.0f MB", $1 / 1e6}')"
}

build_image() {
  log "docker build on $BASE_TAG"
  # The classic builder: BuildKit would need the buildx plugin, which Debian's docker.io
  # does not ship.
  if ! DOCKER_BUILDKIT=0 docker build --network host --build-arg "BASE=$BASE_TAG" \
    -f "$REPO/config/manager/Dockerfile" -t "$IMAGE" "$REPO" >"$WORK/build.log" 2>&1; then
    tail -30 "$WORK/build.log" >&2
    die "docker build failed (log: $WORK/build.log)"
  fi
  log "image $IMAGE: $(docker image inspect "$IMAGE" --format '{{.Size}}' | awk '{printf "%.0f MB", $1 / 1e6}')"
}

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

run_container() {
  log "local cluster in $TFJOB_CLUSTER_DIR"
  "$HERE/cluster.sh" up >/dev/null
  local cfg bin metrics probes
  cfg=$(mktemp -d "$WORK/config.XXXXXX")
  bin=$("$PY" -c 'import hack.cluster as c; print(c.load_state(c.cluster_dir())["bin_dir"])')
  # The container's user (65532) cannot read the cluster's PKI, so it gets a copy with
  # every credential inline, readable by anyone: a test cluster's, thrown away after.
  "$bin/kubectl" --kubeconfig "$TFJOB_CLUSTER_DIR/kubeconfig" config view --raw --flatten --minify \
    >"$cfg/kubeconfig"
  chmod 0755 "$cfg" && chmod 0644 "$cfg/kubeconfig"
  metrics=$(free_port)
  probes=$(free_port)
  # /metrics is served as deployed (HTTPS, a token and RBAC): a scraper's ServiceAccount
  # bound to config/rbac's metrics-reader role, and a token of it
  local k=("$bin/kubectl" --kubeconfig "$TFJOB_CLUSTER_DIR/kubeconfig")
  "${k[@]}" apply -f "$REPO/config/rbac/metrics_reader_role.yaml" >/dev/null
  { "${k[@]}" -n default create serviceaccount metrics-scraper --dry-run=client -o yaml
    echo ---
    "${k[@]}" create clusterrolebinding metrics-scraper --dry-run=client -o yaml \
      --clusterrole tfjob-controller-metrics-reader --serviceaccount default:metrics-scraper
  } | "${k[@]}" apply -f - >/dev/null
  "${k[@]}" -n default create token metrics-scraper >"$cfg/scraper-token"
  docker rm -f "$CONTAINER" >/dev/null 2>&1 || true
  # the controller's arguments, one array (tests/unit/test_own_invocations.py parses it)
  local args=(
    --kubeconfig /config/kubeconfig --leader-elect --leader-election-namespace default
    --log-format=json --metrics-bind-address "127.0.0.1:$metrics"
    --health-probe-bind-address "127.0.0.1:$probes"
  )
  log "docker run: user 65532, read-only root, no capabilities, --network host"
  docker run -d --name "$CONTAINER" --network host \
    --user 65532:65532 --read-only --cap-drop ALL --security-opt no-new-privileges \
    -e PYTHONUNBUFFERED=1 -v "$cfg:/config:ro" "$IMAGE" "${args[@]}" >/dev/null
  "$PY" -m hack.image_check --container "$CONTAINER" --token-file "$cfg/scraper-token" \
    --metrics "https://127.0.0.1:$metrics" --probes "http://127.0.0.1:$probes"
  rm -rf "$cfg"
}

mkdir -p "$WORK"
start_engine
build_base
build_image
run_container
log "passed in $(($(date +%s) - T0)) s"
