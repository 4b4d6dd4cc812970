//! Gauges of a node's state, sampled once a second for Prometheus: its Raft view (role,
//! term, leader, log, commit, apply, snapshot and purge positions, readiness), the
//! ledger it has applied (records by state, tombstones, remembered command ids; every ten
//! seconds, the open escalations and the oldest one's age) and its storage engine
//! (writes stopped or delayed, the compaction backlog, memtables, table files, block
//! cache). Only a node with a metrics endpoint samples them.

use std::time::Duration;

use metrics::Unit;
use openraft::async_runtime::WatchReceiver;
use openraft::ServerState;

use ledger_core::EffectState;

use crate::node::LedgerNode;

/// How often the gauges are sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The term this node is in.
pub const RAFT_TERM: &str = "ledger_raft_term";
/// The leader this node knows (0: none).
pub const RAFT_LEADER_ID: &str = "ledger_raft_leader_id";
/// 1 for this node's current role, 0 for the others, by `role`.
pub const RAFT_ROLE: &str = "ledger_raft_role";
/// Index of the last entry in this node's log.
pub const RAFT_LAST_LOG_INDEX: &str = "ledger_raft_last_log_index";
/// Index of the last entry this node knows committed.
pub const RAFT_COMMITTED_INDEX: &str = "ledger_raft_committed_index";
/// Index of the last entry this node applied.
pub const RAFT_APPLIED_INDEX: &str = "ledger_raft_applied_index";
/// Entries committed but not yet applied on this node.
pub const RAFT_APPLY_LAG: &str = "ledger_raft_apply_lag_entries";
/// Index of the last entry in this node's snapshot.
pub const RAFT_SNAPSHOT_INDEX: &str = "ledger_raft_snapshot_index";
/// Index of the last entry purged from this node's log.
pub const RAFT_PURGED_INDEX: &str = "ledger_raft_purged_index";
/// 1 when the health service answers SERVING (a leader known, the log applied).
pub const READY: &str = "ledger_ready";
/// Records kept, by `state`.
pub const RECORDS: &str = "ledger_records";
/// Tombstones of collected records kept.
pub const TOMBSTONES: &str = "ledger_tombstones";
/// Command ids remembered for idempotent retries.
pub const REMEMBERED_COMMANDS: &str = "ledger_remembered_commands";
/// Escalated effects waiting for an operator's decision.
pub const ESCALATIONS_OPEN: &str = "ledger_escalations_open";
/// How long the oldest open escalation has waited (ledger time), 0 when none.
pub const ESCALATION_OLDEST_AGE: &str = "ledger_escalation_oldest_age_seconds";

/// 1 while the storage engine stops writes until its flushes or compactions catch up.
pub const STORAGE_WRITES_STOPPED: &str = "ledger_storage_writes_stopped";
/// Bytes a second the storage engine holds writes to while it delays them; 0 when not.
pub const STORAGE_DELAYED_WRITE_RATE: &str = "ledger_storage_delayed_write_rate_bytes";
/// Bytes compaction has yet to rewrite, by `keyspace`.
pub const STORAGE_PENDING_COMPACTION: &str = "ledger_storage_pending_compaction_bytes";
/// Table files in level 0, by `keyspace`.
pub const STORAGE_LEVEL0_FILES: &str = "ledger_storage_level0_files";
/// Bytes in memtables, by `keyspace`.
pub const STORAGE_MEMTABLE: &str = "ledger_storage_memtable_bytes";
/// Bytes of live table files, by `keyspace`.
pub const STORAGE_TABLE_FILES: &str = "ledger_storage_table_file_bytes";
/// Bytes in the block cache.
pub const STORAGE_BLOCK_CACHE: &str = "ledger_storage_block_cache_bytes";
/// Flushes and compactions running, by `job`.
pub const STORAGE_RUNNING_JOBS: &str = "ledger_storage_running_jobs";

/// Samples between two readings of the escalations (each reads every open one).
const ESCALATIONS_EVERY: u32 = 10;

const DESCRIPTIONS: [(&str, &str); 15] = [
    (RAFT_TERM, "the Raft term this node is in"),
    (RAFT_LEADER_ID, "the leader this node knows, 0 when none"),
    (RAFT_ROLE, "1 for this node's current Raft role, by role"),
    (
        RAFT_LAST_LOG_INDEX,
        "index of the last entry in this node's log",
    ),
    (
        RAFT_COMMITTED_INDEX,
        "index of the last entry this node knows committed",
    ),
    (
        RAFT_APPLIED_INDEX,
        "index of the last entry this node applied",
    ),
    (
        RAFT_APPLY_LAG,
        "entries committed but not yet applied on this node",
    ),
    (
        RAFT_SNAPSHOT_INDEX,
        "index of the last entry in this node's snapshot",
    ),
    (
        RAFT_PURGED_INDEX,
        "index of the last entry purged from this node's log",
    ),
    (
        READY,
        "1 when the node knows a leader and has applied its log",
    ),
    (RECORDS, "effect records kept, by state"),
    (TOMBSTONES, "tombstones of collected records kept"),
    (
        REMEMBERED_COMMANDS,
        "command ids remembered for idempotent retries",
    ),
    (
        ESCALATIONS_OPEN,
        "escalated effects waiting for an operator's decision",
    ),
    (
        ESCALATION_OLDEST_AGE,
        "seconds the oldest open escalation has waited, by ledger time; 0 when none",
    ),
];

const ROLES: [(ServerState, &str); 4] = [
    (ServerState::Leader, "leader"),
    (ServerState::Follower, "follower"),
    (ServerState::Candidate, "candidate"),
    (ServerState::Learner, "learner"),
];

const STORAGE_DESCRIPTIONS: [(&str, Unit, &str); 8] = [
    (
        STORAGE_WRITES_STOPPED,
        Unit::Count,
        "1 while the storage engine stops writes until flushes or compactions catch up",
    ),
    (
        STORAGE_DELAYED_WRITE_RATE,
        Unit::Bytes,
        "bytes a second the storage engine holds writes to while it delays them, 0 when not",
    ),
    (
        STORAGE_PENDING_COMPACTION,
        Unit::Bytes,
        "bytes compaction estimates it has yet to rewrite, by keyspace",
    ),
    (
        STORAGE_LEVEL0_FILES,
        Unit::Count,
        "table files in level 0, by keyspace",
    ),
    (
        STORAGE_MEMTABLE,
        Unit::Bytes,
        "bytes in memtables, by keyspace",
    ),
    (
        STORAGE_TABLE_FILES,
        Unit::Bytes,
        "bytes of live table files on disk, by keyspace",
    ),
    (STORAGE_BLOCK_CACHE, Unit::Bytes, "bytes in the block cache"),
    (
        STORAGE_RUNNING_JOBS,
        Unit::Count,
        "storage flushes and compactions running, by job",
    ),
];

/// Describes the gauges to the installed recorder.
pub fn describe() {
    for (name, help) in DESCRIPTIONS {
        metrics::describe_gauge!(name, Unit::Count, help);
    }
    for (name, unit, help) in STORAGE_DESCRIPTIONS {
        metrics::describe_gauge!(name, unit, help);
    }
}

/// Samples `node`'s gauges until the task is dropped.
pub async fn sample(node: LedgerNode) {
    for round in 0u32.. {
        sample_once(&node);
        sample_storage(&node).await;
        if round % ESCALATIONS_EVERY == 0 {
            sample_escalations(&node);
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
}

fn sample_escalations(node: &LedgerNode) {
    let read = node.reader.read(|l| (l.escalations(), l.clock_ms()));
    if let Ok((escalations, now_ms)) = read {
        metrics::gauge!(ESCALATIONS_OPEN).set(escalations.open as f64);
        let age_ms = escalations
            .oldest_at_ms
            .map_or(0, |at_ms| now_ms.saturating_sub(at_ms));
        metrics::gauge!(ESCALATION_OLDEST_AGE).set(age_ms as f64 / 1_000.0);
    }
}

fn sample_once(node: &LedgerNode) {
    let m = node.raft.metrics().borrow_watched().clone();
    let index = |id: Option<&ledger_raft_store::types::LogId>| id.map_or(0, |id| id.index);
    let committed = index(m.local_committed.as_ref());
    let applied = index(m.last_applied.as_ref());
    metrics::gauge!(RAFT_TERM).set(m.current_term as f64);
    metrics::gauge!(RAFT_LEADER_ID).set(m.current_leader.unwrap_or(0) as f64);
    for (state, role) in ROLES {
        metrics::gauge!(RAFT_ROLE, "role" => role).set(f64::from(u8::from(m.state == state)));
    }
    metrics::gauge!(RAFT_LAST_LOG_INDEX).set(m.last_log_index.unwrap_or(0) as f64);
    metrics::gauge!(RAFT_COMMITTED_INDEX).set(committed as f64);
    metrics::gauge!(RAFT_APPLIED_INDEX).set(applied as f64);
    metrics::gauge!(RAFT_APPLY_LAG).set(committed.saturating_sub(applied) as f64);
    metrics::gauge!(RAFT_SNAPSHOT_INDEX).set(index(m.snapshot.as_ref()) as f64);
    metrics::gauge!(RAFT_PURGED_INDEX).set(index(m.purged.as_ref()) as f64);
    metrics::gauge!(READY).set(f64::from(u8::from(crate::health::is_ready(&m))));
    let counts = node
        .reader
        .read(|l| (l.counts(), l.tombstone_count(), l.remembered_commands()));
    // An unreadable state stops the node's applies; the gauges keep their last values
    // and the health service and logs say why.
    if let Ok((by_state, tombstones, commands)) = counts {
        for state in EffectState::ALL {
            let n = by_state.get(&state).copied().unwrap_or(0);
            metrics::gauge!(RECORDS, "state" => state.as_str()).set(n as f64);
        }
        metrics::gauge!(TOMBSTONES).set(tombstones as f64);
        metrics::gauge!(REMEMBERED_COMMANDS).set(commands as f64);
    }
}

async fn sample_storage(node: &LedgerNode) {
    // RocksDB answers most of these under its database mutex, which a flush or a
    // compaction may hold: off the async workers.
    let disk = node.disk.clone();
    let stats = match ledger_raft_store::blocking(move || disk.engine_stats()).await {
        Ok(Some(stats)) => stats,
        // An engine in memory has nothing to say.
        Ok(None) => return,
        Err(e) => {
            tracing::warn!("cannot read the storage engine's statistics: {e}");
            return;
        }
    };
    metrics::gauge!(STORAGE_WRITES_STOPPED).set(f64::from(u8::from(stats.writes_stopped)));
    metrics::gauge!(STORAGE_DELAYED_WRITE_RATE).set(stats.delayed_write_rate as f64);
    metrics::gauge!(STORAGE_BLOCK_CACHE).set(stats.block_cache_bytes as f64);
    metrics::gauge!(STORAGE_RUNNING_JOBS, "job" => "flush").set(stats.running_flushes as f64);
    metrics::gauge!(STORAGE_RUNNING_JOBS, "job" => "compaction")
        .set(stats.running_compactions as f64);
    for (space, s) in stats.keyspaces {
        let keyspace = space.name();
        metrics::gauge!(STORAGE_PENDING_COMPACTION, "keyspace" => keyspace)
            .set(s.pending_compaction_bytes as f64);
        metrics::gauge!(STORAGE_LEVEL0_FILES, "keyspace" => keyspace).set(s.level0_files as f64);
        metrics::gauge!(STORAGE_MEMTABLE, "keyspace" => keyspace).set(s.memtable_bytes as f64);
        metrics::gauge!(STORAGE_TABLE_FILES, "keyspace" => keyspace).set(s.sst_bytes as f64);
    }
}
