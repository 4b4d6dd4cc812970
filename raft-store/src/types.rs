//! The Raft type configuration and the application data that Raft replicates.
//!
//! One Raft entry carries a batch of client commands: the leader groups what arrives
//! together into one entry (one log write, one fsync, one round of replication) and
//! stamps the batch once ([`Stamp`]: ledger time and bounds on real time). Every replica
//! applies the batch's commands in order at that stamp, so all of them reach the same
//! outcomes.

use std::fmt;
use std::sync::Arc;

use ledger_core::{Command, Outcome, Stamp};
use serde::{Deserialize, Serialize};

use crate::runtime::LedgerRuntime;

/// What one Raft entry asks the ledger to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerRequest {
    /// The leader's stamp when it proposed the batch: ledger time and what it knew of real
    /// time (ms since the Unix epoch). The only clock the state machine ever sees.
    pub stamp: Stamp,
    /// Applied in this order. Shared, not copied, when openraft clones the entry: it
    /// reads every entry back to apply it and, on the leader, once per follower.
    pub commands: Arc<[Command]>,
}

impl LedgerRequest {
    /// `commands` stamped at ledger time `ledger_ms`, with no more known of real time.
    pub fn at(ledger_ms: u64, commands: Vec<Command>) -> Self {
        LedgerRequest {
            stamp: Stamp::at(ledger_ms),
            commands: commands.into(),
        }
    }
}

impl fmt::Display for LedgerRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} commands at {} ms (real time {}..={} ms)",
            self.commands.len(),
            self.stamp.ledger_ms,
            self.stamp.real_ms_min,
            self.stamp.real_ms_max
        )
    }
}

/// A request as the first log format stored it, with ledger time only. Read from old
/// logs as a request whose stamp knows no more of real time ([`Stamp::at`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LedgerRequestV1 {
    pub(crate) stamped_at_ms: u64,
    pub(crate) commands: Vec<Command>,
}

impl From<LedgerRequestV1> for LedgerRequest {
    fn from(old: LedgerRequestV1) -> Self {
        LedgerRequest::at(old.stamped_at_ms, old.commands)
    }
}

impl fmt::Display for LedgerRequestV1 {
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
/// Snapshot data: a point-in-time view of the ledger's tables, or a stream received.
pub use crate::snapshot::SnapshotData;
/// A snapshot with its metadata.
pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, SnapshotData>;

#[cfg(test)]
mod tests {
    use ledger_core::{Caller, Command, CommandBody, TenantSettings};

    use super::*;

    /// The request as it was declared before its commands were shared.
    #[derive(Serialize)]
    struct OwnedCommands {
        stamp: Stamp,
        commands: Vec<Command>,
    }

    #[test]
    fn shared_commands_encode_as_the_owned_list_did() {
        let commands: Vec<Command> = ["c-1", "c-2"]
            .into_iter()
            .map(|id| Command {
                command_id: id.into(),
                caller: Caller::Operator,
                body: CommandBody::PutTenant {
                    tenant: "acme".into(),
                    settings: TenantSettings::default(),
                },
            })
            .collect();
        let stamp = Stamp {
            ledger_ms: 7_000,
            real_ms_min: 6_900,
            real_ms_max: 7_100,
        };
        let config = bincode::config::standard();
        let owned = bincode::serde::encode_to_vec(
            OwnedCommands {
                stamp,
                commands: commands.clone(),
            },
            config,
        )
        .expect("encodes");
        let shared = LedgerRequest {
            stamp,
            commands: commands.into(),
        };
        let bytes = bincode::serde::encode_to_vec(&shared, config).expect("encodes");
        assert_eq!(bytes, owned, "logs and peers of earlier versions read it");
        let (decoded, _): (LedgerRequest, usize) =
            bincode::serde::decode_from_slice(&owned, config).expect("decodes");
        assert_eq!(decoded, shared);
    }
}
