#!/usr/bin/env bash
# hack/cluster.sh up|down|status [flags] — the local control plane; see hack/cluster/.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-$HERE/../.venv/bin/python}
[[ -x "$PY" ]] || PY=python3
export PYTHONPATH="$HERE/..${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" -m hack.cluster "$@"
