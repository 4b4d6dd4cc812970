# Shared by deploy/bench.sh and deploy/bench-retention.sh (sourced, not run): where the
# benchmark keeps its data, the ledger cluster it starts with deploy/cluster.sh, and small
# helpers to read ledger-load's JSON and the nodes' status.

BENCH_DIR=${BENCH_DIR:-.data/bench}
SECONDS_PER_ROW=${SECONDS_PER_ROW:-30}
LEDGER_BASE_PORT=${LEDGER_BASE_PORT:-7400}
OPERATOR_KEY=${OPERATOR_KEY:-operator-demo-key-0001}
TENANT_KEY=${TENANT_KEY:-acme-demo-key-000001}
# Release unless told otherwise: debug numbers say nothing about speed.
BENCH_PROFILE=${BENCH_PROFILE:-release}
BIN=${CARGO_TARGET_DIR:-target}/$BENCH_PROFILE

ledger_endpoints() {
  echo "127.0.0.1:$((LEDGER_BASE_PORT + 1)),127.0.0.1:$((LEDGER_BASE_PORT + 2)),127.0.0.1:$((LEDGER_BASE_PORT + 3))"
}

# Builds the node, ledgerctl and ledger-load (the same packages as deploy/cluster.sh, so
# the same features and no second RocksDB build); BUILD=0 skips it.
build_ledger() {
  [ "${BUILD:-1}" = 0 ] && return 0
  bash deploy/prereqs.sh
  local flags=(--locked -p ledger-node -p ledger-client --bin ledger-node --bin ledgerctl --bin ledger-load)
  [ "$BENCH_PROFILE" = release ] && flags+=(--release)
  cargo build "${flags[@]}"
}

# deploy/cluster.sh on the benchmark's data folder ($1) and ports, with the binaries
# build_ledger made.
ledger_cluster() {
  local data=$1; shift
  DATA=$data BASE_PORT=$LEDGER_BASE_PORT PROFILE=$BENCH_PROFILE BUILD=0 \
    OPERATOR_KEY=$OPERATOR_KEY TENANT_KEY=$TENANT_KEY bash deploy/cluster.sh "$@"
}

# ledger-load against the benchmark cluster, one JSON object on stdout.
ledger_load() {
  "$BIN/ledger-load" --endpoints "$(ledger_endpoints)" --api-key "$TENANT_KEY" \
    --no-reference --output json "$@"
}

# A field of a JSON object on stdin, by a dotted path (`effect.p99_ms`).
json_field() {
  python3 -c '
import json, sys
v = json.load(sys.stdin)
for part in sys.argv[1].split("."):
    v = v[part] if v is not None else None
print("" if v is None else v)' "$1"
}

# `ledgerctl status` of node $1 alone: one JSON document, `{"nodes": [{...}]}`.
node_status() {
  "$BIN/ledgerctl" --endpoints "127.0.0.1:$((LEDGER_BASE_PORT + $1))" \
    --api-key "$OPERATOR_KEY" --output json status 2>/dev/null
}

# A field (`applied_index`, `last_log_index`, `snapshot_index`, `role`) of node $1's
# status; empty when the node is down or the field unset.
status_field() {
  { node_status "$1" || true; } | python3 -c '
import json, sys
try:
    v = json.load(sys.stdin)["nodes"][0].get(sys.argv[1])
except (ValueError, KeyError, IndexError):
    v = None
print("" if v is None else v)' "$2"
}

# Id of the current leader, as node 1..3 see it.
ledger_leader() {
  local n
  for n in 1 2 3; do
    if [ "$(status_field "$n" role)" = leader ]; then echo "$n"; return 0; fi
  done
  return 1
}

# The machine a result was taken on, for the results file.
machine_line() {
  local cpu mem disk
  cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
  mem=$(free -g | awk '/^Mem:/ {print $2 " GiB"}')
  disk=$(df -h "$BENCH_DIR" | awk 'NR == 2 {print $1 ", " $2}')
  local rota; rota=$(lsblk -dno ROTA "$(df "$BENCH_DIR" | awk 'NR == 2 {print $1}')" 2>/dev/null | tr -d " " || true)
  case "$rota" in 0) disk+=" (non-rotational)" ;; 1) disk+=" (reported rotational; virtual disk)" ;; esac
  echo "$(nproc) cores ($cpu), $mem memory, disk $disk"
}

# The CPU time (user and system, seconds) each of the processes $@ has used so far, one
# per line ("?" for a process that is gone), from /proc/PID/stat.
cpu_of() {
  local hz pid
  hz=$(getconf CLK_TCK)
  for pid in "$@"; do
    awk -v hz="$hz" '{printf "%.2f\n", ($14 + $15) / hz}' "/proc/$pid/stat" 2>/dev/null || echo "?"
  done
}

# The pids of the benchmark cluster's nodes 1..3 (data folder $1).
ledger_pids() {
  local n
  for n in 1 2 3; do cat "$1/node$n.pid" 2>/dev/null || echo 0; done
}

# Where a row's CPU went, per effect (or put) in microseconds: "$label us/effect" for each
# process, from the CPU times before ($1) and after ($2), each one number per line in the
# order of the labels ($4, comma-separated), with $3 effects done and the load generator's
# own CPU seconds $5; then the total and how busy that kept the machine's cores over $6
# seconds of wall time.
cpu_note() {
  python3 - "$@" <<'EOF_PY'
import os, sys
before, after, done, labels, load_s, wall = sys.argv[1:7]
try:
    done, wall = float(done), float(wall)
    used = [float(a) - float(b) for b, a in zip(before.split(), after.split())]
    used.append(float(load_s))
except ValueError:
    print("CPU n/a")
    sys.exit()
labels = labels.split(",") + ["load generator"]
if not done or len(used) != len(labels):
    print("CPU n/a")
    sys.exit()
each = ", ".join(f"{l} {1e6 * u / done:.0f}" for l, u in zip(labels, used))
busy = 100 * sum(used) / (wall * len(os.sched_getaffinity(0))) if wall else 0
print(f"CPU us per operation: {each}; total {1e6 * sum(used) / done:.0f} ({busy:.0f}% of the cores)")
EOF_PY
}

# Node $1's Prometheus page (deploy/cluster.sh serves it at BASE_PORT + 90 + n).
scrape_metrics() {
  curl -fsS "http://127.0.0.1:$((LEDGER_BASE_PORT + 90 + $1))/metrics"
}

# Saves every node's metrics page under prefix $1 ($1-1.prom ...).
save_metrics() {
  local n
  for n in 1 2 3; do scrape_metrics "$n" > "$1-$n.prom" || : > "$1-$n.prom"; done
}

# How many elections the cluster held between two sets of pages saved by save_metrics
# ($1 before, $2 after): the rise of the highest Raft term any node reports, "?" when no
# node answered. Term 1 is the cluster's first leader, so a page taken before the nodes
# sampled it (term 0, their gauges are read once a second) counts from 1.
elections_between() {
  python3 - "$1" "$2" <<'EOF_PY'
import re, sys
def highest_term(prefix):
    terms = []
    for node in (1, 2, 3):
        try:
            with open(f"{prefix}-{node}.prom") as page:
                for line in page:
                    m = re.match(r"^ledger_raft_term (\S+)$", line.strip())
                    if m:
                        terms.append(float(m.group(1)))
        except OSError:
            pass
    return max(terms) if terms else None
before, after = highest_term(sys.argv[1]), highest_term(sys.argv[2])
print("?" if before is None or after is None else int(after - max(before, 1)))
EOF_PY
}

# Where a command's time went between two sets of pages saved by save_metrics ($1 before,
# $2 after), with leader $3 and $4 effects done in between: a markdown table of each
# stage's count, mean and total per effect.
stage_table() {
  python3 - "$1" "$2" "$3" "$4" <<'EOF_PY'
import re, sys
before, after, leader = sys.argv[1], sys.argv[2], int(sys.argv[3])
effects = int(sys.argv[4] or 0)
line = re.compile(r'^([a-z_]+)(\{[^}]*\})? (\S+)$')
def load(path):
    out = {}
    for text in open(path):
        m = line.match(text.strip())
        if m:
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out
def delta(node, name, labels=None):
    b, a = load(f"{before}-{node}.prom"), load(f"{after}-{node}.prom")
    total = 0.0
    for (n, l), v in a.items():
        if n == name and (labels is None or all(x in l for x in labels)):
            total += v - b.get((n, l), 0.0)
    return total
followers = [n for n in (1, 2, 3) if n != leader]
rows = [
    ("call: claim (any node, command to answer)", [1, 2, 3], "ledger_call_seconds", ['command="claim"', 'result="applied"'], "call"),
    ("call: report (any node, command to answer)", [1, 2, 3], "ledger_call_seconds", ['command="report"', 'result="applied"'], "call"),
    ("leader: proposer queue", [leader], "ledger_proposer_queue_seconds", None, "command"),
    ("leader: Raft write (append, replicate, commit, apply)", [leader], "ledger_raft_write_seconds", None, "entry"),
    ("leader: log write", [leader], "ledger_log_write_seconds", None, "append"),
    ("leader: log sync (fsync)", [leader], "ledger_log_sync_seconds", None, "sync"),
    ("leader: AppendEntries round trip", [leader], "ledger_replicate_seconds", None, "call"),
    ("followers: AppendEntries served (decoded to answered)", followers, "ledger_append_served_seconds", None, "call"),
    ("leader: apply", [leader], "ledger_apply_seconds", None, "entry"),
    ("followers: log write", followers, "ledger_log_write_seconds", None, "append"),
    ("followers: log sync (fsync)", followers, "ledger_log_sync_seconds", None, "sync"),
    ("followers: apply", followers, "ledger_apply_seconds", None, "entry"),
]
print("| stage | per | count | mean ms | total ms per effect |")
print("|---|---|---|---|---|")
for name, nodes, metric, labels, per in rows:
    count = sum(delta(n, metric + "_count", labels) for n in nodes)
    total = sum(delta(n, metric + "_sum", labels) for n in nodes)
    mean = f"{1000 * total / count:.2f}" if count else "n/a"
    each = f"{1000 * total / effects:.3f}" if effects else "n/a"
    print(f"| {name} | {per} | {count:.0f} | {mean} | {each} |")
entries = delta(leader, "ledger_batch_commands_count")
commands = delta(leader, "ledger_batch_commands_sum")
if entries:
    print(f"\nCommands per Raft entry (leader's batches): {commands / entries:.1f} on average, {entries:.0f} entries.")
EOF_PY
}
