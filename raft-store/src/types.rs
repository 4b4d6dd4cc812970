//! The Raft type configuration and the application data that Raft replicates.
//!
//! One Raft entry carries a batch of client commands: the leader groups what arrives
//! together into one entry (one log write, one fsync, one round of replication) and
//! stamps the batch with its wall time once. Every replica applies the batch's commands
//! in order at that stamped time, so all of them reach the same outcomes.

use std::fmt;
use std::io::Cursor;

use ledger_core::{Command, Outcome};
use serde::{Deserialize, Serialize};

use crate::runtime::LedgerRuntime;
use crate::state_machine::LedgerStateMachine;

/// What one Raft entry asks the ledger to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerRequest {
    /// The leader's wall time when it proposed the batch (ms since the Unix epoch); the
    /// only clock the state machine ever sees.
    pub stamped_at_ms: u64,
    /// Applied in this order.
    pub commands: Vec<Command>,
}

impl fmt::Display for LedgerRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} commands at {} ms",
            self.commands.len(),
            self.stamped_at_ms
        )
    }
}

/// What applying one Raft entry answered: one outcome per command, in the same order.
/// Blank and membership entries answer no outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerResponse {
    /// One per command of the request.
    pub outcomes: Vec<Outcome>,
}

openraft::declare_raft_types!(
    /// The ledger's openraft type configuration.
    pub TypeConfig:
        D = LedgerRequest,
        R = LedgerResponse,
        NodeId = u64,
        Node = openraft::BasicNode,
        AsyncRuntime = LedgerRuntime,
);

/// A Raft node of the ledger.
pub type Raft = openraft::Raft<TypeConfig, LedgerStateMachine>;
/// A Raft log entry.
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
/// A Raft log id (leader and index).
pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
/// A Raft vote.
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
/// A membership configuration with the log id that introduced it.
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
/// What a snapshot covers: last log id and membership.
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
/// Snapshot bytes as they travel and are installed: a versioned encoding of the ledger
/// with its last applied log id and membership.
pub type SnapshotData = Cursor<Vec<u8>>;
/// A snapshot with its metadata.
pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, SnapshotData>;
