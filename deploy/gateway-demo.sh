#!/usr/bin/env bash
# The gateway demo: a local 3-node ledger, a shop MCP server written with the official
# Python SDK (it knows nothing of the ledger), two ledger-mcp-gateway instances in front of
# it, and an agent (the official Python SDK) whose answers a proxy loses after the shop
# acted. The agent retries on the other instance; the shop's own state, printed at the
# end, shows one refund and one ticket. Standalone (own data folder and ports); TLS=1
# reaches the ledger over TLS.
#
#   bash deploy/gateway-demo.sh
#
# Installs the SDKs with gateway/tests/e2e/setup.sh (PyPI and npm, under target/).
set -euo pipefail
cd "$(dirname "$0")/.."

export DATA=${GATEWAY_DEMO_DATA:-.data/gateway-demo}
BIN=${CARGO_TARGET_DIR:-target}/debug
export BASE_PORT=${GATEWAY_DEMO_BASE_PORT:-7400}
OPERATOR_KEY=${OPERATOR_KEY:-operator-demo-key-0001}
TENANT_KEY=${TENANT_KEY:-acme-demo-key-000001}
AGENT_TOKEN=demo-agent-token-acme-0001
E2E=${GATEWAY_E2E_DIR:-target/gateway-e2e}
export TLS=${TLS:-0}
pids=()

cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  bash deploy/cluster.sh stop >/dev/null 2>&1 || true
}

# start NAME PREFIX COMMAND...: runs it in the background, waits for its line
# "PREFIX ADDR", and leaves the address in $ADDR.
start() {
  local name=$1 prefix=$2; shift 2
  "$@" > "$DATA/$name.out" 2> "$DATA/$name.log" &
  pids+=($!)
  for _ in $(seq 150); do
    ADDR=$(sed -n "s/^$prefix //p" "$DATA/$name.out")
    [ -n "$ADDR" ] && return 0
    sleep 0.1
  done
  echo "$name did not start; see $DATA/$name.log" >&2
  exit 1
}

bash deploy/cluster.sh stop >/dev/null 2>&1 || true
rm -rf "$DATA"
trap cleanup EXIT
cargo build --locked -p ledger-mcp-gateway -p ledger-node -p ledger-client --bins
bash gateway/tests/e2e/setup.sh
bash deploy/cluster.sh start
endpoints="127.0.0.1:$((BASE_PORT + 1)),127.0.0.1:$((BASE_PORT + 2)),127.0.0.1:$((BASE_PORT + 3))"
tls_flags=() ledger_tls=""
if [ "$TLS" = 1 ]; then
  ca=$DATA/tls/ca.pem; [[ $ca = /* ]] || ca=$PWD/$ca
  tls_flags=(--ca-cert "$ca")
  ledger_tls=$'[ledger_tls]\nca_cert_file = "'"$ca"'"'
fi
$BIN/ledgerctl --endpoints "$endpoints" --api-key "$OPERATOR_KEY" "${tls_flags[@]}" \
  policy apply deploy/gateway/policies.toml

start shop "listening on" "$E2E/venv/bin/python" gateway/tests/e2e/upstream_py/shop_server.py \
  --port 0 --db "$DATA/shop.db"
shop=$ADDR
cat > "$DATA/gateway.toml" <<TOML
listen_addr = "127.0.0.1:0"
instance = "unnamed"
ledger_endpoints = ["${endpoints//,/\", \"}"]
policy_file = "$PWD/deploy/gateway/policies.toml"
conversation_header = "x-conversation-id"

[[tenants]]
name = "acme"
agent_token = "$AGENT_TOKEN"
ledger_api_key = "$TENANT_KEY"

[[upstreams]]
name = "shop"
url = "http://$shop/mcp"
timeout_ms = 5000

[[tools]]
name = "refund"
upstream = "shop"
key_argument = "request_id"
provider_key_argument = "idempotency_key"
before_effect = { tool_error_pointer = "/error", tool_error_values = ["invalid_amount"] }
lookup = { tool = "find_refunds", arguments = { idempotency_key = "{provider_key}" }, found = "/refunds" }

[[tools]]
name = "create_ticket"
upstream = "shop"
provider_key_argument = "external_ref"
lookup = { tool = "find_tickets", arguments = { external_ref = "{provider_key}" }, found = "/tickets" }

[[tools]]
name = "close_account"
upstream = "shop"
before_effect = { result_pointer = "/declined", result_values = [true] }

[[tools]]
name = "find_refunds"
upstream = "shop"

[[tools]]
name = "find_tickets"
upstream = "shop"

[[tools]]
name = "get_order"
upstream = "shop"

$ledger_tls
TOML
start gw-a listening $BIN/ledger-mcp-gateway --config "$DATA/gateway.toml" --instance gw-a
gateway_a=$ADDR
start gw-b listening $BIN/ledger-mcp-gateway --config "$DATA/gateway.toml" --instance gw-b
gateway_b=$ADDR
echo "shop (official Python SDK) on $shop; gateways gw-a on $gateway_a, gw-b on $gateway_b"

(cd gateway/tests/e2e && PYTHONDONTWRITEBYTECODE=1 "$OLDPWD/$E2E/venv/bin/python" demo_client.py \
  --gateway-a "$gateway_a" --gateway-b "$gateway_b" --token "$AGENT_TOKEN")

echo "The shop's own state (it deduplicates nothing for tickets):"
"$E2E/venv/bin/python" gateway/tests/e2e/upstream_py/shop_server.py --dump --db "$DATA/shop.db" |
  "$E2E/venv/bin/python" -c '
import json, sys
state = json.load(sys.stdin)
for r in state["refunds"]:
    print("  refund {id}: order {order_id}, {amount_cents} cents, key {idempotency_key}".format(**r))
for t in state["tickets"]:
    print("  ticket {id}: {subject!r}, external_ref {external_ref}".format(**t))
print("  {} refund(s), {} ticket(s)".format(len(state["refunds"]), len(state["tickets"])))
'
