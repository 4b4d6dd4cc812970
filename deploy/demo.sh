#!/usr/bin/env bash
# The main job: a local 3-node ledger on RocksDB, and an effect that survives a lost
# answer, a retry from another tool-server instance, and the crash of the leader. Over
# TLS (a local CA and certificates made by deploy/gen-certs.sh, mutual TLS between the
# nodes); TLS=0 runs it in plaintext.
set -euo pipefail
cd "$(dirname "$0")/.."

export DATA=${DATA:-.data/demo}
# Binaries as cargo builds them (CARGO_TARGET_DIR is honoured).
BIN=${CARGO_TARGET_DIR:-target}/debug
export BASE_PORT=${BASE_PORT:-7200}
export TLS=${TLS:-1}
bash deploy/cluster.sh stop >/dev/null 2>&1 || true
rm -rf "$DATA"
trap 'bash deploy/cluster.sh stop >/dev/null' EXIT
bash deploy/cluster.sh start

export LEDGER_ENDPOINTS="127.0.0.1:$((BASE_PORT + 1)),127.0.0.1:$((BASE_PORT + 2)),127.0.0.1:$((BASE_PORT + 3))"
export LEDGER_API_KEY=${TENANT_KEY:-acme-demo-key-000001}
OPERATOR_KEY=${OPERATOR_KEY:-operator-demo-key-0001}
if [ "$TLS" = 1 ]; then export LEDGER_CA_CERT=$DATA/tls/ca.pem; fi
ctl() { $BIN/ledgerctl "$@"; }
# Claims the demo parses: one JSON document each.
ctl_json() { $BIN/ledgerctl --output json "$@"; }
KEY=acme/support-bot/wf-981/turn-4/refund
INTENT='{"order": "o-1", "amount": 500, "currency": "EUR"}'
step() { printf '\n== %s\n' "$*"; }

step "server-a claims the refund through node 2, a follower (it forwards to the leader)"
first=$(ctl_json claim "$KEY" pay/refund "$INTENT" --command-id server-a/claim-1 --holder server-a --endpoint 1)
echo "$first"

step "the answer is lost; server-a retries the same command id through node 3"
again=$(ctl_json claim "$KEY" pay/refund "$INTENT" --command-id server-a/claim-1 --holder server-a --endpoint 2)
echo "$again"
[ "$first" = "$again" ] || { echo "FAIL: the retry got a different answer"; exit 1; }
echo "same grant: one attempt, one provider key"

step "the agent retries through another tool-server instance while server-a is dispatching"
ctl claim "$KEY" pay/refund '{"currency":"EUR","amount":500.0,"order":"o-1"}' \
  --command-id server-b/claim-1 --holder server-b

token=$(sed -n 's/.*"fencing_token":\([0-9]*\).*/\1/p' <<<"$first")
step "server-a reports the provider's answer (fencing token $token)"
ctl report "$KEY" "$token" committed '{"refund_id":"re_123"}' --command-id server-a/report-1

leader=$(bash deploy/cluster.sh leader | cut -d' ' -f1)
step "the leader, node $leader, is killed with SIGKILL"
bash deploy/cluster.sh kill "$leader"

step "the agent retries once more; a surviving node answers with the stored receipt"
replay=$(ctl_json claim "$KEY" pay/refund "$INTENT" --command-id server-c/claim-1 --holder server-c)
echo "$replay"
grep -q '"Replay"' <<<"$replay" || { echo "FAIL: expected a replay"; exit 1; }

step "a model repair changes the amount: the same key with a different intent is a conflict"
ctl claim "$KEY" pay/refund '{"order": "o-1", "amount": 5000, "currency": "EUR"}' \
  --command-id server-c/claim-2 --holder server-c

step "node $leader restarts on its data and catches up"
bash deploy/cluster.sh restart "$leader"
sleep 1
bash deploy/cluster.sh status

printf '\none refund was granted once, replayed after a lost answer, a second instance and a leader crash\n'

TICKET=acme/agent-runtime/ticket-7
TICKET_INTENT='{"title":"refund o-1 was asked twice"}'
step "a ticket whose creation fails three times before any effect: its budget is spent"
for i in 1 2 3; do
  out=$(ctl_json claim "$TICKET" desk/create_ticket "$TICKET_INTENT" \
    --command-id "server-a/ticket-claim-$i" --holder server-a)
  t=$(sed -n 's/.*"fencing_token":\([0-9]*\).*/\1/p' <<<"$out")
  ctl report "$TICKET" "$t" failed "HTTP 503 before processing" \
    --command-id "server-a/ticket-report-$i" >/dev/null
done
ctl claim "$TICKET" desk/create_ticket "$TICKET_INTENT" --command-id server-a/ticket-claim-4 \
  --holder server-a

step "the escalation desk: what waits for a person (ledgerctl list --escalated)"
ctl list --tenant acme --escalated

step "an operator checks the desk's provider, finds no ticket, and settles the escalation read"
# The escalation is named by the newest attempt's fencing token (ledgerctl get shows it).
token=$(ctl_json get "$TICKET" | python3 -c 'import json, sys; print(json.load(sys.stdin)["attempts"][-1]["fencing_token"])')
LEDGER_API_KEY=$OPERATOR_KEY ctl decide "$TICKET" not-committed --escalation-token "$token" \
  --operator alice --note "no ticket with this key at the desk provider"
ctl list --tenant acme --escalated

leader=$(bash deploy/cluster.sh leader | cut -d' ' -f1)
step "headline numbers from the leader's metrics (http://127.0.0.1:$((BASE_PORT + 90 + leader))/metrics)"
sleep 1.5  # gauges are sampled once a second
python3 - "$((BASE_PORT + 90 + leader))" <<'PY'
import sys, urllib.request
page = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
wanted = ("ledger_outcomes_total", "ledger_refusals_total", "ledger_records{",
          "ledger_escalations_open", "ledger_raft_term", "ledger_raft_leader_id", "ledger_ready")
for line in page.splitlines():
    if line.startswith(wanted) and not line.endswith(" 0"):
        print(line)
PY

bash deploy/cluster.sh stop >/dev/null
trap - EXIT
step "the same through MCP: stateless tool servers, an agent whose answers get lost"
bash deploy/mcp-demo.sh
