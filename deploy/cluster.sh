#!/usr/bin/env bash
# A local 3-node effect ledger on loopback, all data under one folder.
#
#   deploy/cluster.sh start          build, start nodes 1..3, form the cluster, configure
#                                    the demo tenant and tools
#   deploy/cluster.sh stop           stop every node (SIGTERM, graceful)
#   deploy/cluster.sh status         each node's view: role, leader, term, indexes
#   deploy/cluster.sh kill N         SIGKILL node N (a crash)
#   deploy/cluster.sh restart N      start node N again on its data
#   deploy/cluster.sh leader         print the leader's node id and address
#   deploy/cluster.sh reload         SIGHUP every node: secrets and certificates read again
#
# Environment: DATA (default .data/cluster), BASE_PORT (default 7100: nodes on 7101..7103,
# their Prometheus metrics on http://127.0.0.1:7191..7193/metrics),
# PROFILE (default debug; release for benchmarks), BUILD (default 1; 0 starts the binaries
# already in target/PROFILE without building), EXTRA_CONFIG (whole TOML tables other than
# [raft], appended to every node's configuration at every start or restart, e.g.
# $'[proposer]\nmax_in_flight_batches = 4'; see node/src/config.rs), TLS (default 0; 1
# makes a CA and certificates under $DATA/tls with deploy/gen-certs.sh, serves TLS on
# every node with mutual TLS between them, and points ledgerctl at the CA; unset, it is 1
# when $DATA/tls holds a CA from an earlier start, so later commands need not repeat it).
set -euo pipefail
cd "$(dirname "$0")/.."

DATA=${DATA:-.data/cluster}
BASE_PORT=${BASE_PORT:-7100}
PROFILE=${PROFILE:-debug}
BUILD=${BUILD:-1}
NODES=(1 2 3)
OPERATOR_KEY=${OPERATOR_KEY:-operator-demo-key-0001}
TENANT_KEY=${TENANT_KEY:-acme-demo-key-000001}
SECRET=${CLUSTER_SECRET:-local-cluster-secret-0001}
BIN=${CARGO_TARGET_DIR:-target}/$PROFILE
TLS_DIR=$DATA/tls
if [ -z "${TLS:-}" ]; then TLS=0; [ -s "$TLS_DIR/ca.pem" ] && TLS=1; fi

endpoints() {
  local list=()
  for n in "${NODES[@]}"; do list+=("127.0.0.1:$((BASE_PORT + n))"); done
  (IFS=,; echo "${list[*]}")
}

tls_flags() {
  [ "$TLS" = 1 ] || return 0
  echo "--ca-cert $TLS_DIR/ca.pem"
}

# shellcheck disable=SC2046 # the TLS flags are paths without spaces, split on purpose
ctl() { "$BIN/ledgerctl" --endpoints "$(endpoints)" --api-key "$OPERATOR_KEY" $(tls_flags) "$@"; }

build() {
  bash deploy/prereqs.sh
  local flags=(--locked --bin ledger-node --bin ledgerctl)
  [ "$PROFILE" = release ] && flags+=(--release)
  cargo build "${flags[@]}" -p ledger-node -p ledger-client
}

write_config() {
  local n=$1
  mkdir -p "$DATA/node$n"
  cat > "$DATA/node$n.toml" <<EOF
node_id = $n
listen_addr = "127.0.0.1:$((BASE_PORT + n))"
metrics_listen_addr = "127.0.0.1:$((BASE_PORT + 90 + n))"
data_dir = "$DATA/node$n"
cluster_secret = "$SECRET"

[[api_keys]]
key = "$OPERATOR_KEY"
operator = true

[[api_keys]]
key = "$TENANT_KEY"
tenant = "acme"

[raft]
heartbeat_interval_ms = 100
election_timeout_min_ms = 600
election_timeout_max_ms = 1200
EOF
  if [ "$TLS" = 1 ]; then
    cat >> "$DATA/node$n.toml" <<EOF

[tls]
cert_file = "$TLS_DIR/node$n.pem"
key_file = "$TLS_DIR/node$n.key"
client_ca_file = "$TLS_DIR/ca.pem"
EOF
  fi
  if [ -n "${EXTRA_CONFIG:-}" ]; then printf '%s\n' "$EXTRA_CONFIG" >> "$DATA/node$n.toml"; fi
}

# The pid of node $n when its pid file names a running ledger-node (a pid file left by a
# node that died may name another process by now); nothing otherwise.
node_pid() {
  local pid
  pid=$(cat "$DATA/node$1.pid" 2>/dev/null) || return 0
  if kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = ledger-node ]; then
    echo "$pid"
  fi
}

start_node() {
  local n=$1
  write_config "$n"
  if [ -n "$(node_pid "$n")" ]; then
    echo "node $n already running"; return
  fi
  RUST_LOG=${RUST_LOG:-info} nohup "$BIN/ledger-node" --config "$DATA/node$n.toml" \
    >> "$DATA/node$n.log" 2>&1 &
  echo $! > "$DATA/node$n.pid"
  echo "node $n started (pid $!, 127.0.0.1:$((BASE_PORT + n)), log $DATA/node$n.log)"
}

# Stops node $n with $2 (TERM by default); one that has not exited after 10 s is
# killed, so that no second node is ever started on the same data while it runs.
stop_node() {
  local n=$1 signal=${2:-TERM}
  local pid; pid=$(node_pid "$n")
  if [ -n "$pid" ]; then
    kill "-$signal" "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "node $n did not stop on $signal within 10 s: killing it"
      kill -KILL "$pid"
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
    echo "node $n stopped ($signal)"
  fi
  rm -f "$DATA/node$n.pid"
}

# Whether no node holds a Raft log yet, so the cluster is still to be formed (as
# deploy/container/bootstrap.sh decides it: a data folder may exist from a start that
# failed before the cluster was formed).
unformed() {
  ! ctl --output json status | grep -q '"last_log_index":[0-9]'
}

case "${1:-}" in
  start)
    [ "$BUILD" = 0 ] || build
    mkdir -p "$DATA"
    if [ "$TLS" = 1 ]; then bash deploy/gen-certs.sh "$TLS_DIR" node1 node2 node3 client; fi
    for n in "${NODES[@]}"; do start_node "$n"; done
    members=()
    for n in "${NODES[@]}"; do members+=("$n=127.0.0.1:$((BASE_PORT + n))"); done
    ctl wait-ready --timeout-ms 60000
    if unformed; then
      ctl init "${members[@]}"
    fi
    ctl wait-leader --timeout-ms 20000
    ctl tenant put acme
    ctl tool put acme pay/refund keyed_idempotent --horizon-ms 86400000 --processing-ms 30000
    ctl tool put acme desk/create_ticket unkeyed_create
    ;;
  stop) for n in "${NODES[@]}"; do stop_node "$n"; done ;;
  status) ctl status ;;
  leader) ctl leader ;;
  kill) stop_node "${2:?node id}" KILL ;;
  restart) start_node "${2:?node id}"; ctl wait-leader --timeout-ms 20000 ;;
  reload)
    # SIGHUP: every node reads its configuration's secrets and certificates again.
    for n in "${NODES[@]}"; do
      pid=$(node_pid "$n")
      if [ -n "$pid" ]; then
        kill -HUP "$pid" && echo "node $n reloading"
      else
        echo "node $n is not running"
      fi
    done ;;
  wait-ready) ctl wait-ready --timeout-ms 60000 ;;
  *) sed -n '2,19p' "$0"; exit 2 ;;
esac
