#!/usr/bin/env bash
# The ledger's write throughput and latency beside two things a user could use instead,
# all on this machine and this disk, one table at the end (markdown, also written to
# $BENCH_DIR/results.md):
#
#   1. etcd 3.4 (Debian etcd-server), 3 members on loopback, loaded with its own
#      `etcdctl check perf --load=L` for each L in ETCD_LOADS (Debian ships no etcd
#      `benchmark` tool, so no percentiles: check perf reports throughput, the slowest
#      request and the standard deviation; load l is 500 clients rate-limited to 8000
#      writes/s for 60 s); then, for percentiles at the ledger's offered loads,
#      `ledger-load --etcd` at each client count in CLIENTS: the ledger's load generator,
#      its clients putting new keys (256-byte values) instead of claiming effects.
#   2. The ledger, 3 release nodes started by deploy/cluster.sh, loaded with ledger-load
#      (claim + report of new effects) at each client count in CLIENTS.
#   Then, for latency at the same offered load, both again on fresh clusters (after
#      WARM_UP_SECONDS at the first rate, not counted), in an open loop
#      (`ledger-load --rate R`): R effects, or R etcd puts, started a second on a fixed
#      schedule for each R in RATES, at most RATE_IN_FLIGHT unanswered, each latency
#      counted from its scheduled start; a second table puts the two side by side.
#   3. PostgreSQL 15, one server, a claim table keyed by effect key: pgbench runs a claim
#      (INSERT ... ON CONFLICT DO NOTHING) then a report (UPDATE), each its own
#      transaction with synchronous_commit=on and fsync=on, at the same client counts;
#      p50/p99/p999 from pgbench's per-transaction log.
#
# Ratios are effects/s (or PostgreSQL claim+report pairs/s) over etcd's writes/s at the
# first load in ETCD_LOADS. For each ledger row, the nodes' Prometheus pages before and
# after it give where an effect's time went (proposer queue, Raft write, log write and
# sync, replication round trips, apply; bench-lib.sh's stage_table) and how many
# elections the row saw (the rise of the highest Raft term, 0 when none; the same for
# each rate); the last row's breakdown ends the results. Each row also gives the CPU time
# (user and system, from /proc and ledger-load's own getrusage) each process spent per
# operation: etcd's members or the ledger's nodes, and the load generator. Runs as root
# (installs etcd; PostgreSQL runs as PG_USER).
#
# Environment: SECONDS_PER_ROW (default 30), CLIENTS (default "1 16 64 256"), ETCD_LOADS
# (default "l"), RATES (default "500 2000 5000"; empty for none), RATE_IN_FLIGHT (1024),
# WARM_UP_SECONDS (5),
# BENCH_DIR (default .data/bench; etcd, ledger and PostgreSQL data all go there),
# LEDGER_BASE_PORT (7400), ETCD_BASE_PORT (23700), PG_PORT (54329),
# PG_USER (postgres), PG_BIN (PostgreSQL's initdb and pg_ctl; default the newest
# /usr/lib/postgresql/N/bin, installing Debian's postgresql when there is none),
# SKIP ("etcd", "ledger" and/or "postgres" to leave out),
# BENCH_PROFILE (release), BUILD (1; 0 uses the binaries already built).
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/bench-lib.sh

CLIENTS=${CLIENTS:-"1 16 64 256"}
ETCD_LOADS=${ETCD_LOADS:-l}
RATES=${RATES-"500 2000 5000"}
RATE_IN_FLIGHT=${RATE_IN_FLIGHT:-1024}
WARM_UP_SECONDS=${WARM_UP_SECONDS:-5}
ETCD_BASE_PORT=${ETCD_BASE_PORT:-23700}
PG_PORT=${PG_PORT:-54329}
PG_USER=${PG_USER:-postgres}
PG_BIN=${PG_BIN:-}
SKIP=${SKIP:-}
RESULTS=$BENCH_DIR/results.md
ETCD_PIDS=()
declare -A ETCD_P99=()
# "p50 p99 p999 achieved/s failures" of each open-loop row by rate (the ledger's followed
# by its elections).
declare -A ETCD_AT=() LEDGER_AT=()
# CPU per operation at each rate, everything counted ("us (busy% of the cores)").
declare -A ETCD_CPU_AT=() LEDGER_CPU_AT=()
STAGES=

skipped() { [[ " $SKIP " == *" $1 "* ]]; }

cleanup() {
  set +e
  for pid in "${ETCD_PIDS[@]}"; do kill "$pid" 2>/dev/null; done
  [ -d "$BENCH_DIR/ledger" ] && ledger_cluster "$BENCH_DIR/ledger" stop >/dev/null 2>&1
  if [ -f "$BENCH_DIR/pg/data/postmaster.pid" ]; then
    runuser -u "$PG_USER" -- "$PG_BIN/pg_ctl" -D "$BENCH_DIR/pg/data" -m fast stop >/dev/null 2>&1
  fi
}
trap cleanup EXIT

rm -rf "$BENCH_DIR"
mkdir -p "$BENCH_DIR"
ROWS=()
ETCD_WRITES_PER_S=""

ratio() {
  [ -n "$ETCD_WRITES_PER_S" ] || { echo "n/a"; return; }
  python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}x')" "$1" "$ETCD_WRITES_PER_S"
}

# --- etcd -------------------------------------------------------------------------------

etcd_url() { echo "http://127.0.0.1:$((ETCD_BASE_PORT + $1))"; }

run_etcd() {
  if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
    echo "== installing etcd-server and etcd-client (Debian)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq etcd-server etcd-client >/dev/null
  fi
  local endpoints
  endpoints=$(etcd_endpoints)
  start_etcd
  local load out writes slowest stddev
  for load in $ETCD_LOADS; do
    echo "== etcd: etcdctl check perf --load=$load (60 s)"
    out=$(ETCDCTL_API=3 etcdctl --endpoints "$endpoints" check perf --load="$load" 2>&1 || true)
    echo "$out" | grep -E 'PASS|FAIL' || echo "$out" | tail -5
    writes=$(echo "$out" | grep -oE '[0-9]+ writes/s' | grep -oE '^[0-9]+' || true)
    slowest=$(echo "$out" | grep -i slowest | grep -oE '[0-9]+\.[0-9]+s' | tr -d s || true)
    stddev=$(echo "$out" | grep -i stddev | grep -oE '[0-9]+\.[0-9]+s' | tr -d s || true)
    [ -n "$ETCD_WRITES_PER_S" ] || ETCD_WRITES_PER_S=$writes
    ROWS+=("| etcd 3.4 put (\`check perf --load=$load\`) | $(etcd_clients "$load") | ${writes:-?} writes/s | n/a | n/a | n/a | $(ratio "${writes:-0}") | slowest $(ms "$slowest") ms, stddev $(ms "$stddev") ms |")
  done
  local c json per_s cpu_before cpu_after
  for c in $CLIENTS; do
    echo "== etcd: ledger-load --etcd, $c clients, $SECONDS_PER_ROW s"
    cpu_before=$(cpu_of "${ETCD_PIDS[@]}")
    json=$("$BIN/ledger-load" --etcd --endpoints "$endpoints" --clients "$c" \
      --seconds "$SECONDS_PER_ROW" --output json)
    cpu_after=$(cpu_of "${ETCD_PIDS[@]}")
    echo "$json" > "$BENCH_DIR/etcd-$c.json"
    per_s=$(echo "$json" | json_field effect.per_s)
    ETCD_P99[$c]=$(echo "$json" | json_field effect.p99_ms)
    ROWS+=("| etcd 3.4 put (\`ledger-load --etcd\`) | $c | $per_s writes/s | $(echo "$json" | json_field effect.p50_ms) | ${ETCD_P99[$c]} | $(echo "$json" | json_field effect.p999_ms) | $(ratio "$per_s") | failures $(echo "$json" | json_field failures); $(run_cpu_note "member 1,member 2,member 3" "$cpu_before" "$cpu_after" "$json") |")
  done
  # The rates on fresh members, so that nothing the client rows left behind (compaction,
  # a grown database) lands in them, after a few seconds at the first rate that are not
  # counted (connections, the first files); the ledger's likewise.
  if [ -n "$RATES" ]; then
    stop_etcd
    rm -rf "$BENCH_DIR/etcd"
    start_etcd
    echo "== etcd: warm-up, --rate ${RATES%% *}, $WARM_UP_SECONDS s (not counted)"
    "$BIN/ledger-load" --etcd --endpoints "$endpoints" --rate "${RATES%% *}" \
      --clients "$RATE_IN_FLIGHT" --seconds "$WARM_UP_SECONDS" --output json >/dev/null
  fi
  local rate
  for rate in $RATES; do
    echo "== etcd: ledger-load --etcd --rate $rate, $SECONDS_PER_ROW s"
    cpu_before=$(cpu_of "${ETCD_PIDS[@]}")
    json=$("$BIN/ledger-load" --etcd --endpoints "$endpoints" --rate "$rate" \
      --clients "$RATE_IN_FLIGHT" --seconds "$SECONDS_PER_ROW" --output json)
    cpu_after=$(cpu_of "${ETCD_PIDS[@]}")
    echo "$json" > "$BENCH_DIR/etcd-rate-$rate.json"
    ETCD_AT[$rate]=$(open_loop_fields "$json")
    ETCD_CPU_AT[$rate]=$(run_cpu_note "member 1,member 2,member 3" "$cpu_before" "$cpu_after" \
      "$json" | total_cpu)
  done
  stop_etcd
}

etcd_endpoints() {
  local endpoints="" n
  for n in 1 2 3; do endpoints+="${endpoints:+,}$(etcd_url "$n")"; done
  echo "$endpoints"
}

# Three etcd members on loopback with their data in $BENCH_DIR/etcd, once they answer. The
# Debian package starts a single-member etcd of its own on 2379; ours use other ports.
start_etcd() {
  local cluster="" endpoints n
  endpoints=$(etcd_endpoints)
  for n in 1 2 3; do cluster+="${cluster:+,}e$n=$(etcd_url $((n + 10)))"; done
  for n in 1 2 3; do
    etcd --name "e$n" --data-dir "$BENCH_DIR/etcd/e$n" \
      --listen-client-urls "$(etcd_url "$n")" --advertise-client-urls "$(etcd_url "$n")" \
      --listen-peer-urls "$(etcd_url $((n + 10)))" \
      --initial-advertise-peer-urls "$(etcd_url $((n + 10)))" \
      --initial-cluster "$cluster" --initial-cluster-state new \
      --initial-cluster-token ledger-bench >>"$BENCH_DIR/etcd-e$n.log" 2>&1 &
    ETCD_PIDS+=("$!")
  done
  for _ in $(seq 100); do
    ETCDCTL_API=3 etcdctl --endpoints "$endpoints" endpoint health >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "etcd did not become healthy; see $BENCH_DIR/etcd-e*.log" >&2
  return 1
}

stop_etcd() {
  local pid
  for pid in "${ETCD_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  ETCD_PIDS=()
}

# Client counts of etcdctl check perf's workloads (etcdctl/ctlv3/command/check.go).
etcd_clients() { case "$1" in s) echo 50 ;; m) echo 200 ;; l) echo 500 ;; xl) echo 1000 ;; esac; }

ms() { [ -n "$1" ] && python3 -c "import sys; print(f'{float(sys.argv[1]) * 1000:.0f}')" "$1" || echo "?"; }

# --- the ledger -------------------------------------------------------------------------

run_ledger() {
  echo "== ledger: starting 3 $BENCH_PROFILE nodes (deploy/cluster.sh)"
  ledger_cluster "$BENCH_DIR/ledger" start
  local c json per_s leader pids cpu_before cpu_after
  for c in $CLIENTS; do
    echo "== ledger: $c clients, $SECONDS_PER_ROW s"
    leader=$(ledger_leader || echo 1)
    pids=$(ledger_pids "$BENCH_DIR/ledger")
    save_metrics "$BENCH_DIR/metrics-$c-before"
    # shellcheck disable=SC2086
    cpu_before=$(cpu_of $pids)
    json=$(ledger_load --clients "$c" --seconds "$SECONDS_PER_ROW")
    # shellcheck disable=SC2086
    cpu_after=$(cpu_of $pids)
    save_metrics "$BENCH_DIR/metrics-$c-after"
    echo "$json" > "$BENCH_DIR/ledger-$c.json"
    stage_table "$BENCH_DIR/metrics-$c-before" "$BENCH_DIR/metrics-$c-after" "$leader" \
      "$(echo "$json" | json_field effect.count || echo 0)" > "$BENCH_DIR/stages-$c.md"
    STAGES="$c clients:"$'\n\n'"$(cat "$BENCH_DIR/stages-$c.md")"
    per_s=$(echo "$json" | json_field effect.per_s)
    ROWS+=("| ledger claim+report | $c | $per_s effects/s | $(echo "$json" | json_field effect.p50_ms) | $(echo "$json" | json_field effect.p99_ms) | $(echo "$json" | json_field effect.p999_ms) | $(ratio "$per_s") | back-pressure $(echo "$json" | json_field back_pressure), failures $(echo "$json" | json_field failures), elections $(elections_between "$BENCH_DIR/metrics-$c-before" "$BENCH_DIR/metrics-$c-after")${ETCD_P99[$c]:+; etcd p99 at $c clients ${ETCD_P99[$c]} ms}; $(node_cpu_note "$leader" "$cpu_before" "$cpu_after" "$json") |")
  done
  if [ -n "$RATES" ]; then
    echo "== ledger: a fresh cluster for the rates"
    ledger_cluster "$BENCH_DIR/ledger" stop
    rm -rf "$BENCH_DIR/ledger"
    ledger_cluster "$BENCH_DIR/ledger" start
    echo "== ledger: warm-up, --rate ${RATES%% *}, $WARM_UP_SECONDS s (not counted)"
    ledger_load --rate "${RATES%% *}" --clients "$RATE_IN_FLIGHT" \
      --seconds "$WARM_UP_SECONDS" >/dev/null
  fi
  local rate
  for rate in $RATES; do
    echo "== ledger: --rate $rate, $SECONDS_PER_ROW s"
    save_metrics "$BENCH_DIR/metrics-rate-$rate-before"
    pids=$(ledger_pids "$BENCH_DIR/ledger")
    leader=$(ledger_leader || echo 1)
    # shellcheck disable=SC2086
    cpu_before=$(cpu_of $pids)
    json=$(ledger_load --rate "$rate" --clients "$RATE_IN_FLIGHT" --seconds "$SECONDS_PER_ROW")
    # shellcheck disable=SC2086
    cpu_after=$(cpu_of $pids)
    save_metrics "$BENCH_DIR/metrics-rate-$rate-after"
    LEDGER_CPU_AT[$rate]=$(node_cpu_note "$leader" "$cpu_before" "$cpu_after" "$json" | total_cpu)
    echo "$json" > "$BENCH_DIR/ledger-rate-$rate.json"
    LEDGER_AT[$rate]="$(open_loop_fields "$json") $(elections_between \
      "$BENCH_DIR/metrics-rate-$rate-before" "$BENCH_DIR/metrics-rate-$rate-after")"
  done
  ledger_cluster "$BENCH_DIR/ledger" stop
}

# cpu_note for one ledger-load run: the processes labelled $1 (comma-separated) had CPU
# times $2 before and $3 after it, $4 is its JSON.
run_cpu_note() {
  cpu_note "$2" "$3" "$(echo "$4" | json_field effect.count)" "$1" \
    "$(echo "$4" | json_field cpu_s)" "$(echo "$4" | json_field seconds)"
}

# run_cpu_note for a ledger row: node $1 led; $2 and $3 are the nodes' CPU times before
# and after, $4 ledger-load's JSON.
node_cpu_note() {
  local labels="" n
  for n in 1 2 3; do
    labels+="${labels:+,}node $n"
    [ "$n" = "$1" ] && labels+=" (leader)"
  done
  run_cpu_note "$labels" "$2" "$3" "$4"
}

# The total of a cpu_note on stdin: "us (busy% of the cores)".
total_cpu() { sed -n 's/.*; total \([0-9]*\) (\([0-9]*%\) of the cores)$/\1 (\2)/p'; }

# "p50 p99 p999 achieved/s failures" of an open-loop run's JSON (failures counts
# back-pressure too).
open_loop_fields() {
  local json=$1
  echo "$(echo "$json" | json_field effect.p50_ms) $(echo "$json" | json_field effect.p99_ms)" \
    "$(echo "$json" | json_field effect.p999_ms) $(echo "$json" | json_field effect.per_s)" \
    "$(($(echo "$json" | json_field failures) + $(echo "$json" | json_field back_pressure)))"
}

# The open-loop table: etcd puts and ledger effects at each rate, side by side.
open_loop_table() {
  local rate e l
  echo "| offered per s | etcd put p50 / p99 / p999 ms | etcd puts/s done | ledger effect p50 / p99 / p999 ms | ledger effects/s done | ledger p99 / etcd p99 | failed calls etcd / ledger | ledger elections | CPU us per put / per effect (cores busy) |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for rate in $RATES; do
    read -r -a e <<< "${ETCD_AT[$rate]:-? ? ? ? ?}"
    read -r -a l <<< "${LEDGER_AT[$rate]:-? ? ? ? ? ?}"
    echo "| $rate | ${e[0]} / ${e[1]} / ${e[2]} | ${e[3]} | ${l[0]} / ${l[1]} / ${l[2]} | ${l[3]} | $(p99_ratio "${l[1]}" "${e[1]}") | ${e[4]} / ${l[4]} | ${l[5]} | ${ETCD_CPU_AT[$rate]:-?} / ${LEDGER_CPU_AT[$rate]:-?} |"
  done
}

p99_ratio() {
  python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}x')" "$1" "$2" 2>/dev/null || echo "n/a"
}

# --- PostgreSQL -------------------------------------------------------------------------

# The newest Debian PostgreSQL's bin folder, or nothing.
debian_pg_bin() {
  local dir
  dir=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n 1)
  [ -n "$dir" ] && [ -x "$dir/initdb" ] && echo "$dir"
  return 0
}

run_postgres() {
  [ -n "$PG_BIN" ] || PG_BIN=$(debian_pg_bin)
  if [ -z "$PG_BIN" ] || ! command -v pgbench >/dev/null; then
    echo "== installing postgresql (Debian)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq postgresql >/dev/null
    [ -n "$PG_BIN" ] || PG_BIN=$(debian_pg_bin)
  fi
  if [ ! -x "$PG_BIN/initdb" ]; then
    echo "no PostgreSQL initdb in ${PG_BIN:-/usr/lib/postgresql/*/bin}: set PG_BIN" >&2
    return 1
  fi
  # Absolute: the server runs in its data folder and puts its socket here.
  local pg
  pg=$(realpath -m "$BENCH_DIR/pg")
  id "$PG_USER" >/dev/null 2>&1 || useradd --system --no-create-home "$PG_USER"
  mkdir -p "$pg"
  chown "$PG_USER" "$pg"
  echo "== postgres: initdb in $pg (as $PG_USER)"
  runuser -u "$PG_USER" -- "$PG_BIN/initdb" -D "$pg/data" -U bench --auth=trust >"$pg/initdb.log"
  runuser -u "$PG_USER" -- "$PG_BIN/pg_ctl" -D "$pg/data" -l "$pg/server.log" -w \
    -o "-c port=$PG_PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories='$pg' \
        -c max_connections=300 -c fsync=on -c synchronous_commit=on -c shared_buffers=256MB" \
    start >/dev/null
  local psql=(psql -h 127.0.0.1 -p "$PG_PORT" -U bench -d postgres -q -v ON_ERROR_STOP=1)
  "${psql[@]}" -c "CREATE TABLE claims (
      effect_key text PRIMARY KEY, state text NOT NULL, holder text NOT NULL,
      receipt text, claimed_at timestamptz NOT NULL DEFAULT now())"
  # One claim, then its report: two transactions, like the ledger's claim + report.
  cat > "$pg/claim.sql" <<'EOF'
\set k random(1, 9000000000000000)
INSERT INTO claims (effect_key, state, holder) VALUES ('acme/load/' || :k, 'claimed', 'bench') ON CONFLICT (effect_key) DO NOTHING;
UPDATE claims SET state = 'committed', receipt = 'r-' || :k WHERE effect_key = 'acme/load/' || :k;
EOF
  local c threads out stats per_s
  for c in $CLIENTS; do
    echo "== postgres: pgbench, $c clients, $SECONDS_PER_ROW s"
    threads=$((c < 2 ? c : 2))
    mkdir -p "$pg/log-$c"
    out=$(pgbench -h 127.0.0.1 -p "$PG_PORT" -U bench -n -f "$pg/claim.sql" -c "$c" -j "$threads" \
      -T "$SECONDS_PER_ROW" -l --log-prefix="$pg/log-$c/tx" postgres 2>&1)
    echo "$out" | grep -E '^tps|failed' || true
    stats=$(pgbench_percentiles "$pg/log-$c")
    # pgbench's own rate leaves out the time spent connecting, which at 256 clients is
    # a good part of a short run.
    per_s=$(echo "$out" | sed -n 's/^tps = \([0-9]*\).*without initial connection time.*/\1/p')
    ROWS+=("| PostgreSQL claim+report (2 sync commits) | $c | $per_s pairs/s | $(echo "$stats" | cut -d' ' -f1) | $(echo "$stats" | cut -d' ' -f2) | $(echo "$stats" | cut -d' ' -f3) | $(ratio "$per_s") | 1 server, no replication |")
  done
  runuser -u "$PG_USER" -- "$PG_BIN/pg_ctl" -D "$pg/data" -m fast stop >/dev/null
}

# "p50_ms p99_ms p999_ms" from pgbench per-transaction logs in folder $1 (field 3 is the
# latency in microseconds).
pgbench_percentiles() {
  python3 - "$1" <<'EOF'
import os, sys
folder = sys.argv[1]
lat = []
for name in os.listdir(folder):
    with open(os.path.join(folder, name)) as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 3 and fields[2].isdigit():
                lat.append(int(fields[2]))
lat.sort()
def pct(p):
    if not lat:
        return 0.0
    i = min(max(int(-(-len(lat) * p // 1)), 1), len(lat)) - 1
    return lat[i] / 1000.0
print(f"{pct(0.50):.2f} {pct(0.99):.2f} {pct(0.999):.2f}")
EOF
}

# ledger-load drives the ledger rows and etcd's percentile rows.
if ! skipped etcd || ! skipped ledger; then
  echo "== building the ledger's binaries"
  build_ledger
fi
skipped etcd || run_etcd
skipped ledger || run_ledger
skipped postgres || run_postgres

{
  echo "Taken $(date -u +%Y-%m-%d) on $(machine_line); $SECONDS_PER_ROW s per ledger and PostgreSQL row."
  echo
  echo "| system | clients | throughput | p50 ms | p99 ms | p999 ms | ratio to etcd writes/s | notes |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
  if [ -n "$RATES" ] && { ! skipped etcd || ! skipped ledger; }; then
    echo
    echo "The same offered load (open loop, \`ledger-load --rate\`, at most $RATE_IN_FLIGHT in"
    echo "flight; latency from each operation's scheduled start; an effect is a claim and its"
    echo "report, two replicated commands, an etcd put one; each system on a fresh cluster,"
    echo "after $WARM_UP_SECONDS s at the first rate not counted):"
    echo
    open_loop_table
  fi
  if [ -n "$STAGES" ]; then
    echo
    echo "Where a ledger effect's time went (node metrics over the run; every client count's"
    echo "table is in $BENCH_DIR/stages-N.md), at $STAGES"
  fi
} > "$RESULTS"
echo
cat "$RESULTS"
echo
echo "written to $RESULTS"
