#!/usr/bin/env bash
# Installs what the gateway's end-to-end test runs with, under GATEWAY_E2E_DIR (default
# target/gateway-e2e), from the pinned versions in this folder:
#
#   venv/   a Python venv with requirements.txt (the official MCP Python SDK, pytest)
#   ts/     ts/package.json and ts/package-lock.json installed with `npm ci`, next to
#           symlinks to this folder's ts/*.mjs scripts (run them with
#           `node --preserve-symlinks-main`, so that they find ts/node_modules)
#
#   bash gateway/tests/e2e/setup.sh
#
# Idempotent: each part is installed again only when its pins changed. Environment:
# GATEWAY_E2E_DIR, PYTHON (default python3, 3.10 or later).
set -euo pipefail
cd "$(dirname "$0")/../../.."

here=gateway/tests/e2e
DIR=${GATEWAY_E2E_DIR:-target/gateway-e2e}
export PYTHON=${PYTHON:-python3}
VENV=$DIR/venv
TS=$DIR/ts

# -- Python -----------------------------------------------------------------------------

bash deploy/python-venv.sh "$VENV" "$here/requirements.txt"

# -- Node.js ----------------------------------------------------------------------------

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "node and npm are needed (Node.js 20 or later)" >&2
  exit 1
fi
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 20 ? 1 : 0)'; then
  echo "node $(node --version) is older than 20; the MCP TypeScript SDK v2 needs 20 or later" >&2
  exit 1
fi
mkdir -p "$TS"
ts_pins=$(cat "$here/ts/package.json" "$here/ts/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$TS/.pins" 2>/dev/null)" != "$ts_pins" ] || [ ! -d "$TS/node_modules" ]; then
  echo "== npm ci in $TS"
  cp "$here/ts/package.json" "$here/ts/package-lock.json" "$TS/"
  (cd "$TS" && nice npm ci --no-audit --no-fund --loglevel=error)
  echo "$ts_pins" >"$TS/.pins"
fi
# The scripts stay in the source tree; the links let them resolve $TS/node_modules.
find "$TS" -maxdepth 1 -name '*.mjs' -type l -delete
for script in "$here"/ts/*.mjs; do
  if [ -e "$script" ]; then ln -s "$PWD/$script" "$TS/$(basename "$script")"; fi
done
