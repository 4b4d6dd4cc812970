//! What a node measures, through the `metrics` facade: where a command's time goes on its
//! way through the leader (the proposer's queue, the Raft round that appends, replicates,
//! commits and applies its entry, the AppendEntries round trips to each follower), and
//! the calls the node serves by command and result. The storage layer adds the log
//! writes, syncs and applies (`ledger_raft_store::metrics`). Nothing is recorded unless
//! the binary installs a recorder: `ledger-node` serves them for Prometheus at
//! `metrics_listen_addr`.

use std::time::{Duration, Instant};

use metrics::Unit;

use crate::error::NodeError;

/// Measures how long a stage took, for the histograms here only: a duration on this
/// node's monotonic clock, never a time the ledger acts on (those come from
/// `clock::Clock` and the bound on ledger time).
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(Instant);

impl Stopwatch {
    /// Starts now.
    #[allow(clippy::disallowed_methods)]
    pub fn start() -> Stopwatch {
        Stopwatch(Instant::now())
    }

    /// The time since [`Stopwatch::start`].
    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }

    /// The time from `earlier` to this one's start.
    pub fn since(&self, earlier: Stopwatch) -> Duration {
        self.0.saturating_duration_since(earlier.0)
    }
}

/// Seconds a command waits in the leader's proposer queue until its batch is proposed.
pub const QUEUE_SECONDS: &str = "ledger_proposer_queue_seconds";
/// Seconds from proposing a batch to its outcomes: the Raft append, replication to a
/// quorum, commit and apply of its entry. Batches that fail (leadership lost) are not
/// counted.
pub const RAFT_WRITE_SECONDS: &str = "ledger_raft_write_seconds";
/// Commands in one proposed batch (one Raft entry).
pub const BATCH_COMMANDS: &str = "ledger_batch_commands";
/// Seconds of one AppendEntries call carrying entries, to the follower's answer (it has
/// written and synced them), by follower.
pub const REPLICATE_SECONDS: &str = "ledger_replicate_seconds";
/// Seconds to serve one ledger command on this node (routing to the leader, the
/// command's Raft round, the answer), by command and result. Calls refused before they
/// are a command (unauthenticated, malformed) are answered at once and not counted.
pub const CALL_SECONDS: &str = "ledger_call_seconds";

/// The `result` label of a served call: `applied`, `refused`, or what failed.
pub fn result_label(result: &Result<ledger_core::Outcome, NodeError>) -> &'static str {
    match result {
        Ok(ledger_core::Outcome::Refused(_)) => "refused",
        Ok(_) => "applied",
        Err(NodeError::Unavailable(_)) => "unavailable",
        Err(NodeError::NotLeader(_)) => "not_leader",
        Err(NodeError::Timeout(_)) => "timeout",
        Err(NodeError::Overloaded { .. }) => "overloaded",
        Err(NodeError::BadRequest(_)) => "bad_request",
        Err(NodeError::Unauthenticated(_)) => "unauthenticated",
        Err(NodeError::PermissionDenied(_)) => "permission_denied",
        Err(NodeError::NotFound(_)) => "not_found",
        Err(NodeError::Internal(_)) => "internal",
    }
}

/// Every metric of the node with its unit and help text.
const DESCRIPTIONS: [(&str, Unit, &str); 5] = [
    (
        QUEUE_SECONDS,
        Unit::Seconds,
        "time a command waits in the leader's proposer queue for its batch",
    ),
    (
        RAFT_WRITE_SECONDS,
        Unit::Seconds,
        "time from proposing a batch to its outcomes: append, replication, commit, apply",
    ),
    (
        BATCH_COMMANDS,
        Unit::Count,
        "commands in one proposed batch (one Raft entry)",
    ),
    (
        REPLICATE_SECONDS,
        Unit::Seconds,
        "one AppendEntries call carrying entries, until the follower has them synced",
    ),
    (
        CALL_SECONDS,
        Unit::Seconds,
        "one ledger call served by this node, by command and result",
    ),
];

/// Describes every metric of the node and of its storage to the installed recorder.
pub fn describe() {
    let storage = ledger_raft_store::metrics::DESCRIPTIONS;
    for (name, unit, help) in DESCRIPTIONS.into_iter().chain(storage) {
        metrics::describe_histogram!(name, unit, help);
    }
}
