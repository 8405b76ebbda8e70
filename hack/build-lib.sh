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

# host_mirror: the Debian mirror this machine's apt uses, so debootstrap fetches from the
# same place (empty: debootstrap's own default).
host_mirror() {
  {
    cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {for (i = 2; i <= NF; i++) print $i}'
    cat /etc/apt/sources.list 2>/dev/null | awk '$1 == "deb" {print ($2 ~ /^\[/ ? $3 : $2)}'
  } | grep -v -e security -e '^#' | head -n 1 || true
}

# trust_host_cas ROOTFS: behind a TLS-intercepting proxy the machine's CA bundle differs
# from Debian's; a root filesystem built here then trusts both.
trust_host_cas() {
  local bundle=/etc/ssl/certs/ca-certificates.crt
  if [[ -f $bundle && -f $1$bundle ]] && ! cmp -s "$bundle" "$1$bundle"; then
    log "this machine's CA bundle differs from Debian's (a TLS-intercepting proxy?): the image trusts both"
    cat "$bundle" >>"$1$bundle"
  fi
}
