#!/usr/bin/env bash
# End to end with an MCP client that is not rmcp: the official Python SDK (pinned in
# requirements.txt) drives two ledger-mcp-server instances over a local 3-node ledger
# (deploy/cluster.sh) and the fake providers; see test_e2e.py for what it checks.
#
#   bash mcp-server/tests/python/run.sh [pytest args, e.g. -k repair]
#
# Builds the binaries, makes a venv (target/python-e2e/venv) with pip from PyPI, runs
# pytest within MCP_PY_TIMEOUT_S (default 600) seconds. Logs and configs go to a fresh
# folder under target/python-e2e/, kept when the run fails. Environment: PYTHON (default
# python3, 3.10 or later), MCP_PY_VENV, MCP_PY_TIMEOUT_S.
set -euo pipefail
cd "$(dirname "$0")/../../.."

here=mcp-server/tests/python
export PYTHON=${PYTHON:-python3}
VENV=${MCP_PY_VENV:-target/python-e2e/venv}
TIMEOUT_S=${MCP_PY_TIMEOUT_S:-600}

bash deploy/prereqs.sh
cargo build --locked -p ledger-mcp-example -p ledger-node -p ledger-client --bins
# The binaries just built, wherever cargo put them.
built=${CARGO_TARGET_DIR:-target}/debug
[[ $built = /* ]] || built=$PWD/$built
export LEDGER_BIN_DIR=${LEDGER_BIN_DIR:-$built}

bash deploy/python-venv.sh "$VENV" "$here/requirements.txt"

mkdir -p target/python-e2e
work=$(mktemp -d "$PWD/target/python-e2e/run-XXXXXX")
# Whatever a killed run left behind: its services (pid files) and its cluster.
cleanup() {
  local rc=$?
  for pidfile in "$work"/*.pid; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  DATA="$work/cluster" bash deploy/cluster.sh stop >/dev/null 2>&1 || true
  if [ "$rc" = 0 ]; then
    rm -rf "$work"
  else
    echo "the Python end-to-end test failed; logs and configs in $work" >&2
  fi
}
trap cleanup EXIT

E2E_WORK=$work PYTHONDONTWRITEBYTECODE=1 timeout --kill-after=30 "$TIMEOUT_S" \
  "$VENV/bin/python" -m pytest -p no:cacheprovider --rootdir "$here" -v "$here/test_e2e.py" "$@"
