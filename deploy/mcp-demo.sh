#!/usr/bin/env bash
# The MCP part of the demo: a local 3-node ledger, fake providers, two stateless MCP
# tool-server instances, and an agent whose answers a proxy loses after the server has
# answered. The agent retries through the other instance; the providers' own state shows
# one refund and one message per recipient. Standalone (own data folder and ports), so
# deploy/demo.sh can call it at its end. TLS=1 (as deploy/demo.sh sets it) reaches the
# ledger over TLS.
set -euo pipefail
cd "$(dirname "$0")/.."

export DATA=${MCP_DEMO_DATA:-.data/mcp-demo}
# Binaries as cargo builds them (CARGO_TARGET_DIR is honoured).
BIN=${CARGO_TARGET_DIR:-target}/debug
export BASE_PORT=${MCP_DEMO_BASE_PORT:-7300}
OPERATOR_KEY=${OPERATOR_KEY:-operator-demo-key-0001}
TENANT_KEY=${TENANT_KEY:-acme-demo-key-000001}
AGENT_TOKEN=demo-agent-token-acme-0001
export TLS=${TLS:-0}
pids=()

cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  bash deploy/cluster.sh stop >/dev/null 2>&1 || true
}

# start NAME COMMAND...: runs it in the background, waits for its "listening ADDR" line,
# and leaves the address in $ADDR.
start() {
  local name=$1; shift
  "$@" > "$DATA/$name.out" 2> "$DATA/$name.log" &
  pids+=($!)
  for _ in $(seq 100); do
    ADDR=$(sed -n 's/^listening //p' "$DATA/$name.out")
    [ -n "$ADDR" ] && return 0
    sleep 0.1
  done
  echo "$name did not start; see $DATA/$name.log" >&2
  exit 1
}

bash deploy/cluster.sh stop >/dev/null 2>&1 || true
rm -rf "$DATA"
trap cleanup EXIT
cargo build --locked -p ledger-mcp-example --bins
bash deploy/cluster.sh start
endpoints="127.0.0.1:$((BASE_PORT + 1)),127.0.0.1:$((BASE_PORT + 2)),127.0.0.1:$((BASE_PORT + 3))"
tls_flags=() ledger_tls=""
if [ "$TLS" = 1 ]; then
  ca=$DATA/tls/ca.pem; [[ $ca = /* ]] || ca=$PWD/$ca
  tls_flags=(--ca-cert "$ca")
  ledger_tls=$'[ledger_tls]\nca_cert_file = "'"$ca"'"'
fi
$BIN/ledgerctl --endpoints "$endpoints" --api-key "$OPERATOR_KEY" "${tls_flags[@]}" \
  policy apply mcp-server/policies.toml

start providers $BIN/fake-provider
providers=$ADDR
cat > "$DATA/mcp.toml" <<TOML
listen_addr = "127.0.0.1:0"
instance = "unnamed"
ledger_endpoints = ["${endpoints//,/\", \"}"]
policy_file = "$PWD/mcp-server/policies.toml"
provider_addr = "$providers"
request_state_key = "demo-request-state-key-shared-by-all-instances"

[[tenants]]
name = "acme"
agent_token = "$AGENT_TOKEN"
ledger_api_key = "$TENANT_KEY"

$ledger_tls
TOML
start mcp-a $BIN/ledger-mcp-server --config "$DATA/mcp.toml" --instance mcp-a
server_a=$ADDR
start mcp-b $BIN/ledger-mcp-server --config "$DATA/mcp.toml" --instance mcp-b
server_b=$ADDR
echo "providers on $providers; MCP instances mcp-a on $server_a, mcp-b on $server_b"

$BIN/mcp-demo-agent --socket "$DATA/proxy.sock" --token "$AGENT_TOKEN" \
  --server "mcp-a=$server_a" --server "mcp-b=$server_b" --providers "$providers"
