#!/usr/bin/env bash
# ledger-bootstrap: forms a new cluster once, then applies policy files. Safe to run again
# (a restarted compose project, a re-run Kubernetes Job): it initializes only when no node
# holds a Raft log, so it never re-forms a cluster that exists.
#
#   LEDGER_ENDPOINTS  every node, host:port,...; the first one is asked to initialize
#   LEDGER_API_KEY    the operator key
#   LEDGER_MEMBERS    the first membership, "1=host:port 2=host:port 3=host:port": the
#                     addresses peers and clients dial, kept in the membership
#   POLICY_FILES      policy files to apply once a leader is known (optional, space-separated)
#   TIMEOUT_MS        how long to wait for every node to answer, then for a leader
#                     (default 300000)
set -euo pipefail

: "${LEDGER_ENDPOINTS:?every node, host:port,...}"
: "${LEDGER_API_KEY:?the operator key}"
: "${LEDGER_MEMBERS:?the first membership, 1=host:port ...}"
timeout_ms=${TIMEOUT_MS:-300000}

echo "== waiting for every node to answer ($LEDGER_ENDPOINTS)"
ledgerctl wait-ready --timeout-ms "$timeout_ms"
ledgerctl status
# One JSON document: {"nodes":[{..., "leader_id":N|null, "last_log_index":N|null}, ...]}.
status=$(ledgerctl --output json status)
if grep -q '"leader_id":[0-9]' <<<"$status"; then
  echo "== a leader is known: the cluster exists, nothing to initialize"
elif grep -q '"last_log_index":[0-9]' <<<"$status"; then
  echo "== a node holds a Raft log: the cluster exists and is electing a leader"
else
  echo "== no node holds a log: forming the cluster $LEDGER_MEMBERS"
  # Word splitting is wanted: one argument per member.
  # shellcheck disable=SC2086
  ledgerctl init $LEDGER_MEMBERS
fi
ledgerctl wait-leader --timeout-ms "$timeout_ms"
for file in ${POLICY_FILES:-}; do
  ledgerctl policy apply "$file"
done
ledgerctl status
