#!/usr/bin/env bash
# How the ledger behaves as retained records pile up: for each N in RECORDS, a fresh
# 3-node release cluster (deploy/cluster.sh) is preloaded with N committed effects
# (`ledger-load --preload N`), then measured:
#
#   - claim+report throughput and p99 at CLIENTS clients for SECONDS_PER_ROW seconds;
#   - RSS of each node (VmRSS in /proc/PID/status);
#   - disk bytes per record: `du` of each node's data folder over the records it holds;
#   - snapshot build time: from the node logs, openraft's "build snapshot" line to the
#     "update_snapshot" line that follows it (the longest on any node);
#   - snapshot install time: a follower is killed, writes go on until the leader's log is
#     purged past it, the follower is restarted and must install a snapshot; reported
#     as the time from restart to caught up (under the 16-client load of the last apply
#     phase below), and the install itself from its log ("install complete snapshot" to
#     "Done install complete snapshot");
#   - apply stalls: the leader's longest apply of one entry (its `ledger_apply_seconds`
#     summary's quantile 1, polled every second) under the same 16-client load in three
#     phases: steady; while the follower is down and the leader builds snapshots until its
#     log is purged past it; while the restarted follower is sent and installs a snapshot
#     and catches up. Each phase starts after the summary's one-minute window has let go
#     of the one before; the client's p99 is given for the first and the last;
#   - SIGKILL to serving again, follower: killed and restarted at once; time until its
#     status answers with its applied index at the leader's applied index at the kill;
#   - SIGKILL to serving again, leader: time until a claim sent to the two survivors is
#     accepted (a new leader is elected and commits), then the time until the old leader,
#     restarted, has caught up.
#
# Results in $BENCH_DIR/retention.md. Environment: RECORDS (default
# "100000 1000000 10000000"), CLIENTS (default 64), SECONDS_PER_ROW (default 30),
# BENCH_DIR (default .data/bench), LEDGER_BASE_PORT (7400), BENCH_PROFILE (release),
# BUILD (1; 0 uses the binaries already built).
set -euo pipefail
cd "$(dirname "$0")/.."
source deploy/bench-lib.sh

RECORDS=${RECORDS:-"100000 1000000 10000000"}
CLIENTS=${CLIENTS:-64}
RESULTS=$BENCH_DIR/retention.md
DATA=""

cleanup() {
  set +e
  # An apply phase's poller and load loop stop when their flag file goes.
  [ -n "$DATA" ] && rm -f "$DATA/phase"
  local job
  for job in $(jobs -p); do kill "$job" 2>/dev/null; done
  [ -n "$DATA" ] && ledger_cluster "$DATA" stop >/dev/null 2>&1
}
trap cleanup EXIT

now_s() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$(now_s)"; }

# Waits (up to $3 s) until node $1's applied index reaches $2; prints the seconds waited.
wait_applied() {
  local n=$1 target=$2 started; started=$(now_s)
  local deadline=$(( $(date +%s) + $3 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    local applied; applied=$(status_field "$n" applied_index)
    if [ -n "$applied" ] && [ "$applied" -ge "$target" ]; then since "$started"; return 0; fi
    sleep 0.05
  done
  echo "timeout"
}

# Longest "build snapshot" -> "update_snapshot" and "install complete snapshot" -> "Done
# install complete snapshot" spans in the logs given, in seconds: "build install".
snapshot_spans() {
  python3 - "$@" <<'EOF'
import sys
from datetime import datetime
def ts(line):
    try:
        return datetime.fromisoformat(line.split()[0].replace("Z", "+00:00")).timestamp()
    except (ValueError, IndexError):
        return None
build = install = None
for path in sys.argv[1:]:
    started = install_started = None
    for line in open(path, errors="replace"):
        t = ts(line)
        if t is None:
            continue
        if ": build snapshot" in line:
            started = t
        elif "update_snapshot:" in line and started is not None:
            build = max(build or 0.0, t - started); started = None
        elif "Done install complete snapshot" in line and install_started is not None:
            install = max(install or 0.0, t - install_started); install_started = None
        elif "install complete snapshot" in line:
            install_started = t
fmt = lambda v: "none" if v is None else f"{v:.2f}"
print(fmt(build), fmt(install))
EOF
}

rss_mib() {
  local pid; pid=$(cat "$DATA/node$1.pid")
  awk '/^VmRSS:/ {printf "%.0f", $2 / 1024}' "/proc/$pid/status"
}

# The longest apply of one entry on node $1 in the last minute, in ms; empty when the
# node does not answer.
apply_max_ms() {
  { scrape_metrics "$1" 2>/dev/null || true; } |
    awk '/^ledger_apply_seconds\{quantile="1"\}/ {printf "%.1f", $2 * 1000}'
}

# Keeps node $2's highest apply_max_ms, polled every second while file $1 exists, in $1.max.
watch_apply() {
  local flag=$1 n=$2 max=0 v
  while [ -e "$flag" ]; do
    v=$(apply_max_ms "$n")
    [ -n "$v" ] && max=$(awk -v a="$v" -v b="$max" 'BEGIN { print (a > b) ? a : b }')
    sleep 1
  done
  echo "$max" > "$flag.max"
}

# 16 clients, 5 s at a time, while file $1 exists; each run's JSON line appended to $1.load.
load_while() {
  while [ -e "$1" ]; do ledger_load --clients 16 --seconds 5 >> "$1.load" || sleep 1; done
}

# Runs "$@" under a 16-client load after a minute without it (the window of the apply
# summaries), watching node $1's applies; prints "longest-apply-ms client-p99-ms", the
# p99 the highest of the 5 s load runs', or "failed" for the apply when "$@" failed.
apply_phase() {
  local n=$1 flag=$DATA/phase ok=1; shift
  sleep 61
  rm -f "$flag".*
  touch "$flag"
  watch_apply "$flag" "$n" & local poller=$!
  load_while "$flag" & local load=$!
  "$@" >/dev/null || ok=0
  rm -f "$flag"
  wait "$poller" "$load"
  local p99; p99=$(python3 -c '
import json, sys
p99s = []
for line in open(sys.argv[1]):
    try:
        p99s.append(json.loads(line)["effect"]["p99_ms"])
    except (ValueError, KeyError, TypeError):
        pass
print(max((p for p in p99s if p is not None), default="none"))' "$flag.load" || echo none)
  local max; max=$(cat "$flag.max" 2>/dev/null || true)
  [ "$ok" = 1 ] || max=failed
  echo "${max:-none} ${p99:-none}"
}

# Waits (the load goes on) until leader $1's snapshot is past log index $2 and its log is
# purged behind it: it keeps logs_kept_after_snapshot (1000) entries behind its snapshot.
until_purged() {
  local leader=$1 held=$2 deadline=$(( $(date +%s) + 300 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    local snap; snap=$(status_field "$leader" snapshot_index)
    [ -n "$snap" ] && [ "$snap" -gt $((held + 1000)) ] && return 0
    sleep 1
  done
  return 1
}

# Restarts node $1 and waits until it has node $2's applied index at the restart; prints
# the seconds from restart to caught up in $DATA/catch-up.
restart_and_catch_up() {
  local f=$1 leader=$2 target
  target=$(status_field "$leader" applied_index)
  ledger_cluster "$DATA" restart "$f" >/dev/null
  wait_applied "$f" "$target" 600 > "$DATA/catch-up"
}

# Leader $2's apply phases around a snapshot install on follower $1 (see the header):
# "steady-apply steady-p99 built-apply sent-apply sent-p99 catch-up-seconds".
snapshot_install() {
  local f=$1 leader=$2 held steady built sent
  steady=$(apply_phase "$leader" sleep 20)
  held=$(status_field "$f" last_log_index)
  ledger_cluster "$DATA" kill "$f" >/dev/null
  built=$(apply_phase "$leader" until_purged "$leader" "$held")
  sent=$(apply_phase "$leader" restart_and_catch_up "$f" "$leader")
  echo "$steady ${built%% *} $sent $(cat "$DATA/catch-up")"
}

measure() {
  local n=$1
  DATA=$BENCH_DIR/retention-$n
  rm -rf "$DATA"
  echo "== $n records: starting a fresh cluster"
  ledger_cluster "$DATA" start >/dev/null
  # The demo tenant's default quotas (a million records, 1 GiB) would refuse the rows
  # above them: room for every record the row preloads and measures, twice over.
  cat > "$DATA/quota.toml" <<EOF_QUOTA
[[tenant]]
name = "acme"
live_records_max = $(( 2 * n + 1000000 ))
stored_bytes_max = $(( (2 * n + 1000000) * 4096 ))
EOF_QUOTA
  "$BIN/ledgerctl" --endpoints "$(ledger_endpoints)" --api-key "$OPERATOR_KEY" \
    policy apply "$DATA/quota.toml" >/dev/null
  echo "== $n records: preloading, then $CLIENTS clients for $SECONDS_PER_ROW s"
  local json; json=$(ledger_load --preload "$n" --clients "$CLIENTS" --seconds "$SECONDS_PER_ROW")
  echo "$json" > "$DATA.json"
  local records=$(( $(echo "$json" | json_field preload.records) + $(echo "$json" | json_field effect.count) ))
  local preload_s; preload_s=$(echo "$json" | json_field preload.seconds)

  local rss="" bytes="" node
  for node in 1 2 3; do
    rss+="${rss:+ / }$(rss_mib "$node")"
    bytes+="${bytes:+ / }$(( $(du -sb "$DATA/node$node" | cut -f1) / records ))"
  done

  local leader follower
  leader=$(ledger_leader)
  follower=$(( leader % 3 + 1 ))
  echo "== $n records: follower $follower killed and restarted"
  local target; target=$(status_field "$leader" applied_index)
  local killed; killed=$(now_s)
  ledger_cluster "$DATA" kill "$follower" >/dev/null
  ledger_cluster "$DATA" restart "$follower" >/dev/null
  local waited; waited=$(wait_applied "$follower" "$target" 600)
  local follower_s; follower_s=$(since "$killed")
  [ "$waited" = timeout ] && follower_s=timeout

  echo "== $n records: leader $leader killed"
  killed=$(now_s)
  ledger_cluster "$DATA" kill "$leader" >/dev/null
  local others; others=$(ledger_endpoints | tr ',' '\n' | grep -v ":$((LEDGER_BASE_PORT + leader))$" | paste -sd,)
  local leader_s=failed
  if "$BIN/ledgerctl" --endpoints "$others" --api-key "$TENANT_KEY" claim "acme/load/failover-$n" \
      pay/refund '{"failover":true}' --command-id "failover-$n" >/dev/null; then
    leader_s=$(since "$killed")
  fi
  local new_leader; new_leader=$(ledger_leader || echo "$follower")
  target=$(status_field "$new_leader" applied_index)
  ledger_cluster "$DATA" restart "$leader" >/dev/null
  local old_leader_s; old_leader_s=$(wait_applied "$leader" "$target" 600)

  echo "== $n records: snapshot install on follower $leader"
  local phases; read -r -a phases <<< "$(snapshot_install "$leader" "$new_leader")"
  local spans; spans=$(snapshot_spans "$DATA"/node*.log)

  ROWS+=("| $n | $(echo "$json" | json_field effect.per_s) | $(echo "$json" | json_field effect.p99_ms) | $preload_s | $rss | $bytes | ${spans%% *} | ${spans##* } / ${phases[5]} | ${phases[0]} / ${phases[2]} / ${phases[3]} | ${phases[1]} / ${phases[4]} | $follower_s | $leader_s / $old_leader_s |")
  ledger_cluster "$DATA" stop >/dev/null
  DATA=""
}

mkdir -p "$BENCH_DIR"
build_ledger
ROWS=()
for n in $RECORDS; do measure "$n"; done
{
  echo "Taken $(date -u +%Y-%m-%d) on $(machine_line); $CLIENTS clients, $SECONDS_PER_ROW s per row."
  echo
  echo "| records | effects/s | p99 ms | preload s | RSS MiB per node | disk bytes/record per node | snapshot build s | snapshot install s / follower catch-up s | longest leader apply ms: steady / snapshots built / one sent | p99 ms at 16 clients: steady / one sent | follower SIGKILL to serving s | leader SIGKILL to serving s / old leader caught up s |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
} > "$RESULTS"
echo
cat "$RESULTS"
echo
echo "written to $RESULTS"
