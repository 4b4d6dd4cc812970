#!/usr/bin/env bash
# What the gateway adds to a call (the README's table): get_order and refund straight to
# the Python SDK shop and through ledger-mcp-gateway, in one run, release builds, a local
# 3-node ledger on this disk. See gateway/tests/e2e/latency.py.
#
#   bash deploy/gateway-latency.sh [--calls N]      (default 500 per row)
#
# Environment: CARGO_TARGET_DIR (default target-release, so the normal build is left
# alone), BUILD (1; 0 uses the binaries already built).
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target-release}
export PROFILE=release
if [ "${BUILD:-1}" = 1 ]; then
  bash deploy/prereqs.sh
  cargo build --locked --release -p ledger-mcp-gateway -p ledger-node -p ledger-client --bins
fi
export BUILD=0
built=$CARGO_TARGET_DIR/release
[[ $built = /* ]] || built=$PWD/$built
export LEDGER_BIN_DIR=$built RUST_LOG=${RUST_LOG:-warn}
bash gateway/tests/e2e/setup.sh
cd gateway/tests/e2e
PYTHONDONTWRITEBYTECODE=1 "$OLDPWD/${GATEWAY_E2E_DIR:-target/gateway-e2e}/venv/bin/python" latency.py "$@"
