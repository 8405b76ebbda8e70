# Sourced by the build scripts (they define log()).

# stamp_ldflags VERSION: -ldflags for a Kubernetes binary, stamped with VERSION as a
# release build is (what `--version` and the apiserver's /version report).
stamp_ldflags() {
  local v=$1 maj min date ld p
  maj=${v#v}; maj=${maj%%.*}; min=${v#v*.}; min=${min%%.*}
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$v -X $p.gitMajor=$maj -X $p.gitMinor=$min -X $p.gitTreeState=clean"
    ld+=" -X $p.gitCommit=0000000000000000000000000000000000000000 -X $p.buildDate=$date"
  done
  echo "$ld"
}

# with_heartbeat WHAT CMD...: runs CMD and logs "WHAT: still building (Ns)" every 20 s,
# so a person sees a long build is alive.
with_heartbeat() {
  local what=$1; shift
  local t0; t0=$(date +%s)
  "$@" &
  local pid=$!
  local n=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    n=$(( n + 1 ))
    if (( n % 20 == 0 )) && kill -0 "$pid" 2>/dev/null; then
      log "$what: still building ($(( $(date +%s) - t0 ))s)"
    fi
  done
  local rc=0
  wait "$pid" || rc=$?
  if (( rc != 0 )); then
    log "$what: failed (exit $rc) after $(( $(date +%s) - t0 ))s"
    return "$rc"
  fi
  log "$what: done in $(( $(date +%s) - t0 ))s"
}
