//! What the storage layer measures, through the `metrics` facade: the time each node
//! spends writing and syncing the Raft log and applying entries. Nothing is recorded
//! unless the binary installs a recorder (the node's Prometheus exporter).

/// Seconds to write one append's entries to the disk, before the sync.
pub const LOG_WRITE_SECONDS: &str = "ledger_log_write_seconds";
/// Seconds of one sync (fsync) of the log: one for every append written while the sync
/// before ran, however many entries they carry.
pub const LOG_SYNC_SECONDS: &str = "ledger_log_sync_seconds";
/// Seconds to apply one entry: run its commands and write their effects with the
/// applied position in one batch.
pub const APPLY_SECONDS: &str = "ledger_apply_seconds";
/// Ledger commands in one applied entry.
pub const APPLY_COMMANDS: &str = "ledger_apply_commands";

/// Every metric above with its unit and help text.
pub const DESCRIPTIONS: [(&str, metrics::Unit, &str); 4] = [
    (
        LOG_WRITE_SECONDS,
        metrics::Unit::Seconds,
        "Raft log append: writing the entries, before the sync",
    ),
    (
        LOG_SYNC_SECONDS,
        metrics::Unit::Seconds,
        "Raft log: one sync, for every append written while the one before ran",
    ),
    (
        APPLY_SECONDS,
        metrics::Unit::Seconds,
        "applying one Raft entry to the ledger, its writes committed in one batch",
    ),
    (
        APPLY_COMMANDS,
        metrics::Unit::Count,
        "ledger commands carried by one applied Raft entry",
    ),
];
