//! Raft storage for the effect ledger: openraft's log storage and state machine over
//! `ledger-core`, on a small disk trait with a RocksDB implementation and a simulated
//! disk that loses unsynced writes on power failure.
//!
//! Map of the modules:
//! - [`runtime`]: [`LedgerRuntime`], openraft's async runtime over `madsim-tokio` (real
//!   tokio normally, the simulator under `--cfg madsim`), and [`blocking`] for disk work.
//! - [`disk`]: the [`Disk`] trait (keyspaces, atomic batches, explicit
//!   sync), `RocksDisk`, [`SimDisk`] and their shared conformance suite.
//! - [`types`]: the Raft type configuration; a Raft entry carries a batch of ledger
//!   commands stamped with the leader's time.
//! - [`log_store`]: [`RaftLogStore`], the Raft log and vote on a disk.
//! - [`ledger_store`]: [`DiskStore`], the ledger's tables on a disk, with the writes of
//!   the entry being applied pending until committed.
//! - [`state_machine`]: [`LedgerStateMachine`], the ledger applied on disk, one atomic
//!   batch per entry with its log id, and [`LedgerReader`] for queries.
//! - [`snapshot`]: the applied position, snapshots streamed from point-in-time views, and
//!   installs into a second generation swapped in at once.
//! - [`error`]: [`StoreError`], the typed failures behind openraft's `io::Error`s.
//! - [`metrics`]: the names of what the storage layer measures (log writes and syncs,
//!   applies).
//!
//! Everything on disk is bincode 2 of versioned enums (`codec`, `snapshot`) or the
//! ledger's own tagged values (`ledger_core::store`).
//!
//! Starting a node:
//! ```ignore
//! let disk: DiskRef = Arc::new(RocksDisk::open(path)?);
//! let (log_store, state_machine) = ledger_raft_store::open(disk).await?;
//! let reader = state_machine.reader();
//! let raft = Raft::new(node_id, config, network, log_store, state_machine).await?;
//! ```

mod backup;
mod codec;
pub mod disk;
pub mod error;
pub mod ledger_store;
pub mod log_store;
pub mod metrics;
pub mod runtime;
pub mod snapshot;
pub mod state_machine;
pub mod types;

pub use backup::{restore, Restored};
#[cfg(not(madsim))]
pub use disk::RocksDisk;
pub use disk::{
    Disk, DiskError, DiskRef, EngineStats, Keyspace, KeyspaceStats, RocksOptions, SimDisk,
    WriteBatch,
};
pub use error::StoreError;
pub use ledger_store::DiskStore;
pub use log_store::RaftLogStore;
pub use runtime::{blocking, LedgerRuntime};
pub use snapshot::StreamDigest;
pub use snapshot::{SnapshotData, SnapshotReceiver};
pub use state_machine::{Change, LedgerReader, LedgerStateMachine, StoredLedger};
pub use types::{LedgerRequest, LedgerResponse, TypeConfig};

/// A Raft node of the ledger.
pub type Raft = openraft::Raft<TypeConfig, LedgerStateMachine>;

/// Opens the Raft log store and the state machine on one disk. The log store opens
/// first: it checks the storage format and recovers the log after a power failure (see
/// [`log_store`]). The state machine resumes at the position kept on the disk; openraft
/// re-applies the committed log after it. Damaged data fails the open with an error
/// naming it ([`StoreError::is_damaged_data`]).
pub async fn open(disk: DiskRef) -> Result<(RaftLogStore, LedgerStateMachine), StoreError> {
    let log_store = RaftLogStore::open(disk.clone()).await?;
    let state_machine = LedgerStateMachine::open(disk).await?;
    Ok((log_store, state_machine))
}
