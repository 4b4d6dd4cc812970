//! The disk under the Raft log and the state machine: a few ordered keyspaces, atomic
//! write batches, and an explicit `sync`.
//!
//! Writing and making durable are separate steps on purpose. A write is visible to reads
//! at once but may be lost by a power failure; [`Disk::sync`] makes everything written
//! before it durable. Storage code writes a whole group of log entries in one batch and
//! syncs once before acknowledging, so the cost of an fsync is shared by the group.
//!
//! Two implementations pass one conformance suite ([`conformance`]):
//! - `RocksDisk` (not in the simulation build): RocksDB, one column family per keyspace;
//! - [`SimDisk`]: in memory, keeps synced and unsynced writes apart so that a simulated
//!   power failure can drop what was never synced, tear the last write, or flip a bit of
//!   synced data.
//!
//! A disk stores bytes and nothing more; checking them is the storage code's job: every
//! value carries a checksum (`codec`), so a torn or flipped value is caught when read.

use std::fmt;
use std::sync::Arc;

use serde::Deserialize;

pub mod conformance;
#[cfg(not(madsim))]
mod rocks;
mod sim;

#[cfg(not(madsim))]
pub use rocks::RocksDisk;
pub use sim::{BitFlip, PowerFailure, SimDisk, TornValue, TornWrite};

/// The memory RocksDB may use, whatever the amount of data: the ledger's records are
/// read through the block cache, never all held. Plain data, so that a node's
/// configuration (`[rocksdb]`) holds it in every build, the simulation's included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RocksOptions {
    /// One LRU cache shared by every column family for data, index and filter blocks.
    pub block_cache_bytes: usize,
    /// All memtables of all column families together.
    pub write_buffer_bytes: usize,
}

impl Default for RocksOptions {
    fn default() -> Self {
        RocksOptions {
            block_cache_bytes: 128 << 20,
            write_buffer_bytes: 64 << 20,
        }
    }
}

/// A separately ordered key space on a disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Keyspace {
    /// Raft log entries, keyed by big-endian log index.
    Log,
    /// Small Raft records: vote, committed and last purged log ids.
    Meta,
    /// The ledger's tables, under a generation byte and a table id (see
    /// `state_machine`).
    State,
}

impl Keyspace {
    /// Every keyspace, in a fixed order.
    pub const ALL: [Keyspace; 3] = [Keyspace::Log, Keyspace::Meta, Keyspace::State];

    /// A stable name, used as the RocksDB column family name.
    pub fn name(self) -> &'static str {
        match self {
            Keyspace::Log => "log",
            Keyspace::Meta => "meta",
            Keyspace::State => "state",
        }
    }

    /// Position in [`Keyspace::ALL`].
    pub(crate) fn position(self) -> usize {
        match self {
            Keyspace::Log => 0,
            Keyspace::Meta => 1,
            Keyspace::State => 2,
        }
    }
}

impl fmt::Display for Keyspace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One operation of a [`WriteBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOp {
    /// Sets `key` to `value`.
    Put {
        /// Where.
        space: Keyspace,
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// Removes `key` if present.
    Delete {
        /// Where.
        space: Keyspace,
        /// The key.
        key: Vec<u8>,
    },
    /// Removes every key in `[from, to)`; nothing when `from >= to`.
    DeleteRange {
        /// Where.
        space: Keyspace,
        /// First key removed.
        from: Vec<u8>,
        /// First key kept.
        to: Vec<u8>,
    },
}

/// Operations applied atomically and in order by [`Disk::write`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    ops: Vec<WriteOp>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a put.
    pub fn put(
        &mut self,
        space: Keyspace,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) -> &mut Self {
        self.ops.push(WriteOp::Put {
            space,
            key: key.into(),
            value: value.into(),
        });
        self
    }

    /// Adds a delete.
    pub fn delete(&mut self, space: Keyspace, key: impl Into<Vec<u8>>) -> &mut Self {
        self.ops.push(WriteOp::Delete {
            space,
            key: key.into(),
        });
        self
    }

    /// Adds a delete of every key in `[from, to)`.
    pub fn delete_range(
        &mut self,
        space: Keyspace,
        from: impl Into<Vec<u8>>,
        to: impl Into<Vec<u8>>,
    ) -> &mut Self {
        self.ops.push(WriteOp::DeleteRange {
            space,
            from: from.into(),
            to: to.into(),
        });
        self
    }

    /// The operations, in the order they apply.
    pub fn ops(&self) -> &[WriteOp] {
        &self.ops
    }

    /// Whether the batch holds no operation.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// The boxed cause of an engine failure.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A disk operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// The storage engine reported an error (I/O, corruption, a lock held by another
    /// process).
    #[error("storage engine failed: {0}")]
    Engine(BoxError),
    /// An earlier operation panicked half-way; the in-memory state can no longer be
    /// trusted.
    #[error("disk state poisoned by an earlier panic")]
    Poisoned,
}

/// An ordered key-value disk with explicit durability.
///
/// Implementations must be safe to call from several threads; the Raft storage code
/// serialises its own writes.
pub trait Disk: Send + Sync + 'static {
    /// Applies `batch` atomically and in order. The result is visible to reads as soon
    /// as this returns, but not yet durable.
    fn write(&self, batch: WriteBatch) -> Result<(), DiskError>;

    /// Makes everything written before this call durable.
    fn sync(&self) -> Result<(), DiskError>;

    /// The value under `key`.
    fn get(&self, space: Keyspace, key: &[u8]) -> Result<Option<Vec<u8>>, DiskError>;

    /// The values under `keys` (in ascending order), in their order: what [`Disk::get`]
    /// of each would answer, for an engine that looks keys up faster together.
    fn get_many(
        &self,
        space: Keyspace,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Vec<u8>>>, DiskError> {
        keys.iter().map(|key| self.get(space, key)).collect()
    }

    /// At most `limit` pairs with keys in `[from, to)` (to the end when `to` is `None`),
    /// in ascending key order.
    fn range(
        &self,
        space: Keyspace,
        from: &[u8],
        to: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, DiskError>;

    /// The pair with the largest key.
    fn last(&self, space: Keyspace) -> Result<Option<KeyValue>, DiskError>;

    /// A read-only view of `space` as it is now, unchanged by later writes; snapshots are
    /// streamed from one while writes go on.
    fn view(&self, space: Keyspace) -> Result<Box<dyn DiskView>, DiskError>;

    /// What the engine says about its own state now, for the node's gauges; `None` from
    /// an engine with nothing to say (one in memory).
    fn engine_stats(&self) -> Result<Option<EngineStats>, DiskError> {
        Ok(None)
    }
}

/// A storage engine's account of itself: whether it is holding writes back while its
/// flushes and compactions catch up, how far behind those are, and what it keeps in
/// memory and on disk. Read from RocksDB's properties (`rocksdb.is-write-stopped` and
/// the like), each a value of the moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Writes wait until flushes or compactions bring the engine back under its limits
    /// (too many memtables, level-0 files or bytes waiting for compaction).
    pub writes_stopped: bool,
    /// The rate, in bytes a second, writes are slowed to while they are delayed (the step
    /// before stopping them); 0 when they are not.
    pub delayed_write_rate: u64,
    /// Bytes in the block cache (shared by every keyspace).
    pub block_cache_bytes: u64,
    /// Flushes running.
    pub running_flushes: u64,
    /// Compactions running.
    pub running_compactions: u64,
    /// Per keyspace, in [`Keyspace::ALL`]'s order.
    pub keyspaces: Vec<(Keyspace, KeyspaceStats)>,
}

/// [`EngineStats`] of one keyspace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyspaceStats {
    /// Bytes in memtables (the active one and those waiting to be flushed).
    pub memtable_bytes: u64,
    /// Bytes of the keyspace's live table files on disk.
    pub sst_bytes: u64,
    /// Table files in level 0: too many slow reads down, and writes are delayed, then
    /// stopped.
    pub level0_files: u64,
    /// Bytes compaction estimates it must rewrite to bring every level under its target
    /// size: the backlog that delays, then stops, writes when it grows too large.
    pub pending_compaction_bytes: u64,
}

/// A frozen, point-in-time view of one keyspace (see [`Disk::view`]).
pub trait DiskView: Send + Sync + 'static {
    /// At most `limit` pairs with keys in `[from, to)` (to the end when `to` is `None`),
    /// in ascending key order, as of when the view was taken.
    fn range(
        &self,
        from: &[u8],
        to: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<KeyValue>, DiskError>;
}

/// A key and its value.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// A shared handle to a disk; the log store and the state machine share one.
pub type DiskRef = Arc<dyn Disk>;
