#!/usr/bin/env bash
# End to end, the gateway with servers and clients no one here wrote: the official MCP
# Python SDK (PyPI) and TypeScript SDK (npm), pinned in this folder. A local 3-node ledger
# (deploy/cluster.sh), a shop upstream of each SDK, two ledger-mcp-gateway instances and a
# lossy proxy in front of each; see test_gateway.py for what it checks, and
# test_upstreams.py for the checks of the shops and clients themselves.
#
#   bash gateway/tests/e2e/run.sh            # pytest arguments pass through: -k late
#
# Builds the binaries, installs the SDKs (setup.sh, under target/gateway-e2e/), runs pytest
# within GATEWAY_E2E_TIMEOUT_S (default 900) seconds. Logs, state and configurations of a
# run go to a fresh folder under target/gateway-e2e/runs/, kept when the run fails.
set -euo pipefail
cd "$(dirname "$0")/../../.."

here=gateway/tests/e2e
TIMEOUT_S=${GATEWAY_E2E_TIMEOUT_S:-900}
DIR=${GATEWAY_E2E_DIR:-target/gateway-e2e}

bash deploy/prereqs.sh
cargo build --locked -p ledger-mcp-gateway -p ledger-node -p ledger-client --bins
# The binaries just built, wherever cargo put them.
built=${CARGO_TARGET_DIR:-target}/debug
[[ $built = /* ]] || built=$PWD/$built
export LEDGER_BIN_DIR=${LEDGER_BIN_DIR:-$built}
bash "$here/setup.sh"

mkdir -p "$DIR/runs"
before=$(ls "$DIR/runs")
# Whatever a killed run left behind: its services (pid files) and its cluster.
cleanup() {
  local rc=$?
  for run in "$DIR"/runs/*/; do
    case " $before " in *" $(basename "$run") "*) continue ;; esac
    for pidfile in "$run"*.pid; do
      [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
    done
    [ -d "$run/cluster" ] && DATA="$run/cluster" bash deploy/cluster.sh stop >/dev/null 2>&1 || true
    if [ "$rc" = 0 ]; then
      rm -rf "$run"
    else
      echo "the gateway's end-to-end test failed; logs and state in $run" >&2
    fi
  done
}
trap cleanup EXIT

PYTHONDONTWRITEBYTECODE=1 timeout --kill-after=30 "$TIMEOUT_S" \
  "$DIR/venv/bin/python" -m pytest -p no:cacheprovider --rootdir "$here" -v \
  "$here/test_upstreams.py" "$here/test_gateway.py" "$@"
