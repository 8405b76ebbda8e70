#!/usr/bin/env bash
# hack/cluster.sh up|down|status [flags] — the local control plane; see hack/cluster.py.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-$HERE/../.venv/bin/python}
[[ -x "$PY" ]] || PY=python3
exec "$PY" "$HERE/cluster.py" "$@"
