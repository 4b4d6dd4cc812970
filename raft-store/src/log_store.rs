//! The Raft log and vote, on a [`Disk`](crate::disk::Disk).
//!
//! Entries live in [`Keyspace::Log`] under their big-endian index, so key order is log
//! order; the vote, the committed log id, the last purged log id and the log's end live
//! in [`Keyspace::Meta`]. Durability follows openraft's contract:
//! - `append` writes all given entries in one batch and returns once they are readable;
//!   a sync task reports them flushed after a sync that covers them. One sync serves
//!   every append written while the one before ran (group commit: never one fsync per
//!   entry), and openraft goes on meanwhile: the leader sends the entries to its
//!   followers while its own disk syncs them, and a follower accepts the next entries
//!   while the last are syncing. Flushes are reported in the order of the appends;
//! - `save_vote`, `truncate_after` and `purge` first wait until every append before them
//!   is reported flushed (openraft sees them in the order it asked for them), then write
//!   and sync before returning;
//! - `save_committed` does not sync. The committed id only lets a restarted node
//!   re-apply its log without waiting for the leader; it becomes durable with the next
//!   synced write, and losing its latest value to a power failure only means re-applying
//!   less.
//!
//! A store is opened with [`RaftLogStore::open`], which checks the storage format and
//! recovers the log after a power failure ([`recovery`]: a torn tail is cut, damage is
//! refused). All writes are serialised by openraft (one log writer), which the disk trait
//! relies on.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use openraft::alias::CommittedLeaderIdOf;
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{BasicNode, EntryPayload, OptionalSend, RaftLogReader};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use crate::codec::{decode, encode};
use crate::disk::{Disk, DiskError, DiskRef, Keyspace, WriteBatch};
use crate::error::StoreError;
use crate::metrics::{LOG_SYNC_SECONDS, LOG_WRITE_SECONDS};
use crate::runtime::blocking;
use crate::types::{Entry, LedgerRequestV1, LogId, TypeConfig, Vote};

const VOTE_KEY: &[u8] = b"vote";
const COMMITTED_KEY: &[u8] = b"committed";
const LAST_PURGED_KEY: &[u8] = b"last_purged";
/// The last index written by an append (or left by a truncation) whose batch reached the
/// disk whole; see [`recovery`].
const LOG_END_KEY: &[u8] = b"log_end";

mod recovery;

pub use recovery::STORAGE_FORMAT;

/// Sorts after every 8-byte key, so `[key, LOG_KEY_END)` reaches the end of the log.
const LOG_KEY_END: [u8; 9] = [0xFF; 9];

fn log_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// A stored log entry, versioned. V1 entries were stamped with ledger time only; V2
/// entries carry the whole [`ledger_core::Stamp`].
#[derive(Serialize, Deserialize)]
enum StoredEntry {
    V1(EntryV1),
    V2(Entry),
}

/// A log entry as V1 stored it.
type EntryV1 =
    openraft::Entry<CommittedLeaderIdOf<TypeConfig>, EntryPayload<LedgerRequestV1, u64, BasicNode>>;

/// A V1 entry in the current form: its request stamped at ledger time only.
fn upgrade_v1(old: EntryV1) -> Entry {
    let payload = match old.payload {
        EntryPayload::Blank => EntryPayload::Blank,
        EntryPayload::Normal(request) => EntryPayload::Normal(request.into()),
        EntryPayload::Membership(membership) => EntryPayload::Membership(membership),
    };
    openraft::Entry {
        log_id: old.log_id,
        payload,
    }
}

/// A stored vote, versioned.
#[derive(Serialize, Deserialize)]
enum StoredVote {
    V1(Vote),
}

/// A stored log id (committed, last purged), versioned.
#[derive(Serialize, Deserialize)]
enum StoredLogId {
    V1(LogId),
}

/// The stored end of the log, versioned: `None` when no entry is covered.
#[derive(Serialize, Deserialize)]
enum StoredLogEnd {
    V1(Option<u64>),
}

fn decode_log_end(bytes: &[u8]) -> Result<Option<u64>, StoreError> {
    let StoredLogEnd::V1(end) =
        decode(bytes, "log end").map_err(|e| e.at(Keyspace::Meta, LOG_END_KEY))?;
    Ok(end)
}

fn encode_log_end(end: Option<u64>) -> Result<Vec<u8>, StoreError> {
    encode(&StoredLogEnd::V1(end), "log end")
}

/// Decodes the entry stored under `key` and checks it sits where its index says.
fn decode_entry(key: &[u8], bytes: &[u8]) -> Result<Entry, StoreError> {
    let entry = match decode(bytes, "log entry").map_err(|e| e.at(Keyspace::Log, key))? {
        StoredEntry::V1(old) => upgrade_v1(old),
        StoredEntry::V2(entry) => entry,
    };
    if key != log_key(entry.index()) {
        return Err(StoreError::Inconsistent(format!(
            "log entry {} stored under key {key:02x?}",
            entry.log_id()
        )));
    }
    Ok(entry)
}

/// A range of log indexes as `[from, to)`; `to` is `None` for "to the end".
fn index_bounds(range: &impl RangeBounds<u64>) -> Option<(u64, Option<u64>)> {
    let from = match range.start_bound() {
        Bound::Included(&index) => index,
        Bound::Excluded(&index) => index.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let to = match range.end_bound() {
        Bound::Included(&index) => index.checked_add(1),
        Bound::Excluded(&index) => Some(index),
        Bound::Unbounded => None,
    };
    Some((from, to))
}

/// The `[from, to)` keys of a range of log indexes; `to` is `None` for "to the end".
fn key_bounds(range: &impl RangeBounds<u64>) -> Option<([u8; 8], Option<[u8; 8]>)> {
    let (from, to) = index_bounds(range)?;
    Some((log_key(from), to.map(log_key)))
}

/// Encoded bytes of the entries kept in [`Recent`] at most.
const RECENT_BYTES_MAX: usize = 2 << 20;

/// The entries appended last, as they were written, for reading them back without the
/// disk: openraft reads every new entry soon after appending it, to apply it and, on the
/// leader, once more for each follower it is sent to; decoding those reads cost about 5% of
/// a loaded node's CPU. The entries kept are the tail of the log, consecutive: an append
/// adds to it once written (a failed write empties it), and a truncation or a purge cuts
/// it before the disk changes, so what it holds is what the disk holds.
struct Recent {
    /// `(entry, encoded bytes)`, by index.
    entries: VecDeque<(Entry, usize)>,
    bytes: usize,
    bytes_max: usize,
}

impl Default for Recent {
    fn default() -> Self {
        Recent {
            entries: VecDeque::new(),
            bytes: 0,
            bytes_max: RECENT_BYTES_MAX,
        }
    }
}

/// Locks the recent entries, whether or not a panic poisoned them (they are only ever
/// changed by whole steps that keep them consecutive).
fn locked(recent: &Mutex<Recent>) -> std::sync::MutexGuard<'_, Recent> {
    recent.lock().unwrap_or_else(|p| p.into_inner())
}

impl Recent {
    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    /// Adds entries written after the last one kept, then forgets the oldest past the
    /// bound. Entries that do not follow on replace what was kept.
    fn extend(&mut self, appended: Vec<(Entry, usize)>) {
        let follows = |first: &Entry, kept: &VecDeque<(Entry, usize)>| {
            kept.back()
                .is_none_or(|(last, _)| last.index().checked_add(1) == Some(first.index()))
        };
        if appended
            .first()
            .is_some_and(|(first, _)| !follows(first, &self.entries))
        {
            self.clear();
        }
        for (entry, bytes) in appended {
            self.bytes += bytes;
            self.entries.push_back((entry, bytes));
        }
        while self.bytes > self.bytes_max {
            match self.entries.pop_front() {
                Some((_, bytes)) => self.bytes -= bytes,
                None => break,
            }
        }
    }

    /// Forgets the entries from index `from` on.
    fn truncate(&mut self, from: u64) {
        while let Some((_, bytes)) = self.entries.back().filter(|(e, _)| e.index() >= from) {
            self.bytes -= bytes;
            self.entries.pop_back();
        }
    }

    /// Forgets the entries up to index `to`, included.
    fn purge(&mut self, to: u64) {
        while let Some((_, bytes)) = self.entries.front().filter(|(e, _)| e.index() <= to) {
            self.bytes -= bytes;
            self.entries.pop_front();
        }
    }

    /// The entries `[from, to)` (`to` `None`: to the end of the log), if all are kept.
    fn get(&self, from: u64, to: Option<u64>) -> Option<Vec<Entry>> {
        let first = self.entries.front()?.0.index();
        let last = self.entries.back()?.0.index();
        let to = to.unwrap_or(last + 1);
        if to <= from {
            return Some(Vec::new());
        }
        if from < first || to > last + 1 {
            return None;
        }
        let skip = (from - first) as usize;
        let take = (to - from) as usize;
        Some(
            self.entries
                .iter()
                .skip(skip)
                .take(take)
                .map(|(e, _)| e.clone())
                .collect(),
        )
    }
}

const SYNC_TASK_STOPPED: &str = "the log's sync task has stopped";

/// What the sync task is asked, in the order of the log's writes.
enum SyncJob {
    /// Report these entries flushed once a sync after their write has returned.
    Flushed(IOFlushed<TypeConfig>),
    /// Answer once every job before this one is done.
    Barrier(oneshot::Sender<()>),
}

/// Syncs the disk for the appends waiting to be reported flushed, as many at once as are
/// waiting, and reports them in order; ends when every store sharing it is dropped. It
/// holds the disk only while it syncs, so that dropping the stores closes the disk.
async fn sync_appends(disk: Weak<dyn Disk>, mut jobs: mpsc::UnboundedReceiver<SyncJob>) {
    while let Some(first) = jobs.recv().await {
        let mut waiting = vec![first];
        while let Ok(next) = jobs.try_recv() {
            waiting.push(next);
        }
        let synced = if waiting.iter().any(|j| matches!(j, SyncJob::Flushed(_))) {
            let Some(disk) = disk.upgrade() else {
                // Every store is gone: nothing waits for these reports.
                return;
            };
            blocking(move || {
                let started = Instant::now();
                let synced = disk.sync();
                metrics::histogram!(LOG_SYNC_SECONDS).record(started.elapsed());
                synced.map_err(|e| e.to_string())
            })
            .await
        } else {
            Ok(())
        };
        for job in waiting {
            match job {
                SyncJob::Flushed(callback) => callback.io_completed(
                    synced
                        .clone()
                        .map_err(|e| StoreError::from(DiskError::Engine(e.into())).into()),
                ),
                SyncJob::Barrier(done) => {
                    let _ = done.send(());
                }
            }
        }
    }
}

/// openraft's log storage and log reader over a shared disk. Cheap to clone: clones
/// share the disk and the sync task.
#[derive(Clone)]
pub struct RaftLogStore {
    disk: DiskRef,
    recent: Arc<Mutex<Recent>>,
    /// Jobs for the sync task, started by the first append.
    syncer: Arc<std::sync::OnceLock<mpsc::UnboundedSender<SyncJob>>>,
}

impl Debug for RaftLogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftLogStore").finish_non_exhaustive()
    }
}

impl RaftLogStore {
    /// A log store on `disk` as it is, without checking or recovering it: for a disk
    /// [`RaftLogStore::open`] has already opened (the store is then shared).
    pub fn new(disk: DiskRef) -> Self {
        RaftLogStore {
            disk,
            recent: Arc::default(),
            syncer: Arc::default(),
        }
    }

    /// Opens the log store on `disk`: checks the storage format (a fresh disk is stamped
    /// with the current one), cuts a torn tail left by a power failure, and verifies
    /// every stored log record. Damage it cannot prove harmless is an error naming it
    /// (see [`recovery`]); the node must then not start on this disk.
    pub async fn open(disk: DiskRef) -> Result<Self, StoreError> {
        let recovering = disk.clone();
        blocking(move || recovery::recover(&recovering)).await?;
        Ok(RaftLogStore::new(disk))
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, Recent> {
        locked(&self.recent)
    }

    /// Hands `job` to the sync task, starting it if this is the first. When the task is
    /// gone (the runtime is shutting down, or it panicked) a flush is reported as failed
    /// and a barrier is never passed.
    fn sync_job(&self, job: SyncJob) {
        let jobs = self.syncer.get_or_init(|| {
            let (jobs, receiver) = mpsc::unbounded_channel();
            tokio::spawn(sync_appends(Arc::downgrade(&self.disk), receiver));
            jobs
        });
        if let Err(mpsc::error::SendError(SyncJob::Flushed(callback))) = jobs.send(job) {
            callback.io_completed(Err(io::Error::other(SYNC_TASK_STOPPED)));
        }
    }

    /// Waits until every append before this call is reported flushed; fails if the sync
    /// task stopped, which may have left some unreported.
    async fn synced_appends(&self) -> Result<(), StoreError> {
        if self.syncer.get().is_none() {
            return Ok(());
        }
        let (done, wait) = oneshot::channel();
        self.sync_job(SyncJob::Barrier(done));
        wait.await
            .map_err(|_| DiskError::Engine(SYNC_TASK_STOPPED.into()).into())
    }

    async fn read_meta<T: Send + 'static>(
        &self,
        key: &'static [u8],
        decode_value: fn(&[u8]) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        let disk = self.disk.clone();
        let bytes = blocking(move || disk.get(Keyspace::Meta, key)).await?;
        bytes
            .map(|bytes| decode_value(&bytes).map_err(|e| e.at(Keyspace::Meta, key)))
            .transpose()
    }

    async fn read_log_id(&self, key: &'static [u8]) -> Result<Option<LogId>, StoreError> {
        self.read_meta(key, |bytes| {
            let StoredLogId::V1(log_id) = decode(bytes, "log id")?;
            Ok(log_id)
        })
        .await
    }

    /// Writes `batch` and syncs, in one trip to the blocking pool, once every append
    /// before it is reported flushed.
    async fn write_synced(&self, batch: WriteBatch) -> Result<(), StoreError> {
        self.synced_appends().await?;
        let disk = self.disk.clone();
        blocking(move || {
            disk.write(batch)?;
            disk.sync()
        })
        .await?;
        Ok(())
    }

    /// The stamp of the last normal entry in the log, if any: the latest ledger time this
    /// node's disk knows, which its snapshot alone may not (the log after it is applied
    /// again only once openraft gets to it). Reads back from the end a few entries at a
    /// time.
    pub async fn latest_stamp(&self) -> Result<Option<ledger_core::Stamp>, StoreError> {
        const WINDOW: u64 = 16;
        let Some(last) = self.last_entry().await? else {
            return Ok(None);
        };
        let mut to = last.index();
        loop {
            let from = to.saturating_sub(WINDOW - 1);
            let entries = self.entries(from..=to).await?;
            let latest = entries
                .iter()
                .filter_map(|entry| match &entry.payload {
                    EntryPayload::Normal(request) => Some(request.stamp),
                    _ => None,
                })
                .max_by_key(|stamp| stamp.ledger_ms);
            if latest.is_some() || entries.len() < (to - from + 1) as usize || from == 0 {
                return Ok(latest);
            }
            to = from - 1;
        }
    }

    async fn last_entry(&self) -> Result<Option<Entry>, StoreError> {
        let disk = self.disk.clone();
        let last = blocking(move || disk.last(Keyspace::Log)).await?;
        last.map(|(key, bytes)| decode_entry(&key, &bytes))
            .transpose()
    }

    async fn entries(&self, range: impl RangeBounds<u64>) -> Result<Vec<Entry>, StoreError> {
        if let Some(entries) =
            index_bounds(&range).and_then(|(from, to)| self.recent().get(from, to))
        {
            return Ok(entries);
        }
        let Some((from, to)) = key_bounds(&range) else {
            return Ok(Vec::new());
        };
        let disk = self.disk.clone();
        let pairs = blocking(move || {
            disk.range(
                Keyspace::Log,
                &from,
                to.as_ref().map(|to| &to[..]),
                usize::MAX,
            )
        })
        .await?;
        pairs
            .iter()
            .map(|(key, bytes)| decode_entry(key, bytes))
            .collect()
    }

    /// Writes `entries` (readable, not yet durable, once this returns). The write is made
    /// on the calling task, not in the blocking pool: without a sync it is a memtable
    /// insert and a write to the page cache (15 to 20 us), less than handing it to another
    /// thread and waking the caller again, which is on the path of every command.
    async fn append_entries(
        &self,
        entries: impl IntoIterator<Item = Entry>,
    ) -> Result<(), StoreError> {
        let mut batch = WriteBatch::new();
        let mut last = None;
        let mut appended = Vec::new();
        for entry in entries {
            let key = log_key(entry.index());
            last = Some(entry.index());
            let stored = StoredEntry::V2(entry);
            let bytes = encode(&stored, "log entry")?;
            let StoredEntry::V2(entry) = stored else {
                unreachable!("stored as V2 above")
            };
            appended.push((entry, bytes.len()));
            batch.put(Keyspace::Log, key, bytes);
        }
        // Last in the batch: present and whole only if every entry before it is.
        if last.is_some() {
            batch.put(Keyspace::Meta, LOG_END_KEY, encode_log_end(last)?);
        }
        if batch.is_empty() {
            return Ok(());
        }
        let started = Instant::now();
        let written = self.disk.write(batch);
        let mut recent = self.recent();
        match written {
            Ok(()) => recent.extend(appended),
            Err(e) => {
                recent.clear();
                return Err(e.into());
            }
        }
        metrics::histogram!(LOG_WRITE_SECONDS).record(started.elapsed());
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for RaftLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        Ok(self.entries(range).await?)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        let vote = self
            .read_meta(VOTE_KEY, |bytes| {
                let StoredVote::V1(vote) = decode(bytes, "vote")?;
                Ok(vote)
            })
            .await?;
        Ok(vote)
    }
}

impl RaftLogStorage<TypeConfig> for RaftLogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let last_purged_log_id = self.read_log_id(LAST_PURGED_KEY).await?;
        let last_entry = self.last_entry().await?;
        let last_log_id = last_entry
            .map(|entry| entry.log_id())
            .or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let mut batch = WriteBatch::new();
        batch.put(
            Keyspace::Meta,
            VOTE_KEY,
            encode(&StoredVote::V1(*vote), "vote")?,
        );
        Ok(self.write_synced(batch).await?)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        let mut batch = WriteBatch::new();
        match committed {
            Some(log_id) => batch.put(
                Keyspace::Meta,
                COMMITTED_KEY,
                encode(&StoredLogId::V1(log_id), "log id")?,
            ),
            None => batch.delete(Keyspace::Meta, COMMITTED_KEY),
        };
        let disk = self.disk.clone();
        blocking(move || disk.write(batch))
            .await
            .map_err(StoreError::from)?;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(self.read_log_id(COMMITTED_KEY).await?)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // A failed write means the entries are not readable: that is this call's error.
        // A failed sync after a good write is reported through the flush callback.
        self.append_entries(entries).await?;
        self.sync_job(SyncJob::Flushed(callback));
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = match last_log_id {
            None => 0,
            Some(log_id) => match log_id.index().checked_add(1) {
                Some(next) => next,
                None => return Ok(()),
            },
        };
        // The end only moves back: raising it past entries on disk would let a later
        // torn append pass for a whole one.
        let end = self.read_meta(LOG_END_KEY, decode_log_end).await?.flatten();
        let end = end
            .zip(from.checked_sub(1))
            .map(|(end, kept)| end.min(kept));
        self.recent().truncate(from);
        let mut batch = WriteBatch::new();
        batch
            .delete_range(Keyspace::Log, log_key(from), LOG_KEY_END)
            .put(Keyspace::Meta, LOG_END_KEY, encode_log_end(end)?);
        Ok(self.write_synced(batch).await?)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        self.recent().purge(log_id.index());
        let mut batch = WriteBatch::new();
        let to: Vec<u8> = match log_id.index().checked_add(1) {
            Some(next) => log_key(next).to_vec(),
            None => LOG_KEY_END.to_vec(),
        };
        batch.delete_range(Keyspace::Log, log_key(0), to).put(
            Keyspace::Meta,
            LAST_PURGED_KEY,
            encode(&StoredLogId::V1(log_id), "log id")?,
        );
        Ok(self.write_synced(batch).await?)
    }
}

#[cfg(test)]
mod tests {
    use ledger_core::{Caller, Command, CommandBody, Stamp, TenantSettings};
    use openraft::vote::RaftLeaderIdExt;
    use openraft::{Membership, RaftTypeConfig};

    use super::*;
    use crate::types::LedgerRequest;

    fn log_id(index: u64) -> LogId {
        LogId::new(
            <TypeConfig as RaftTypeConfig>::LeaderId::new_committed(3, 1),
            index,
        )
    }

    fn stored_v1(index: u64, payload: EntryPayload<LedgerRequestV1, u64, BasicNode>) -> Vec<u8> {
        let old: EntryV1 = openraft::Entry {
            log_id: log_id(index),
            payload,
        };
        encode(&StoredEntry::V1(old), "log entry").expect("encodes")
    }

    #[test]
    fn a_v1_entry_reads_as_stamped_at_ledger_time_only() {
        let command = Command {
            command_id: "c-1".into(),
            caller: Caller::Operator,
            body: CommandBody::PutTenant {
                tenant: "acme".into(),
                settings: TenantSettings::default(),
            },
        };
        let request = LedgerRequestV1 {
            stamped_at_ms: 5_000,
            commands: vec![command.clone()],
        };
        let bytes = stored_v1(7, EntryPayload::Normal(request));
        let entry = decode_entry(&log_key(7), &bytes).expect("a V1 entry decodes");
        assert_eq!(entry.log_id, log_id(7));
        let EntryPayload::Normal(request) = entry.payload else {
            panic!("a normal entry stays normal");
        };
        assert_eq!(request, LedgerRequest::at(5_000, vec![command]));
        assert_eq!(request.stamp, Stamp::at(5_000));

        let bytes = stored_v1(8, EntryPayload::Blank);
        let entry = decode_entry(&log_key(8), &bytes).expect("a V1 blank entry decodes");
        assert!(matches!(entry.payload, EntryPayload::Blank));

        let membership = Membership::new_with_defaults(vec![[1u64, 2, 3].into()], []);
        let bytes = stored_v1(9, EntryPayload::Membership(membership.clone()));
        let entry = decode_entry(&log_key(9), &bytes).expect("a V1 membership entry decodes");
        assert!(matches!(entry.payload, EntryPayload::Membership(m) if m == membership));
    }

    fn normal(index: u64, ledger_ms: u64) -> Entry {
        openraft::Entry {
            log_id: log_id(index),
            payload: EntryPayload::Normal(LedgerRequest::at(ledger_ms, Vec::new())),
        }
    }

    fn blank(index: u64) -> Entry {
        openraft::Entry {
            log_id: log_id(index),
            payload: EntryPayload::Blank,
        }
    }

    /// Reads served from the entries kept in memory are the disk's, through random
    /// appends, truncations and purges, with a bound small enough to forget entries.
    #[test]
    fn entries_read_from_memory_are_those_on_disk() {
        use openraft_rt::AsyncRuntime;
        use rand::rngs::SmallRng;
        use rand::{RngExt, SeedableRng};

        crate::runtime::LedgerRuntime::run(async {
            let disk: DiskRef = std::sync::Arc::new(crate::disk::SimDisk::new());
            let mut store = RaftLogStore::new(disk.clone());
            store.recent().bytes_max = 2_000;
            let mut on_disk = RaftLogStore::new(disk);
            let mut rng = SmallRng::seed_from_u64(11);
            // The next index to append and the first one not purged.
            let (mut next, mut first) = (1u64, 1u64);
            let (mut served, mut fell_back) = (0, 0);
            for step in 0..2_000 {
                match rng.random_range(0..10) {
                    0 if next > first => {
                        let kept = rng.random_range(first - 1..next);
                        store
                            .truncate_after((kept > 0).then(|| log_id(kept)))
                            .await
                            .unwrap();
                        next = next.min(kept + 1).max(first);
                    }
                    1 if next > first + 4 => {
                        let to = rng.random_range(first..next - 2);
                        store.purge(log_id(to)).await.unwrap();
                        first = to + 1;
                    }
                    _ => {
                        let count = rng.random_range(1..6);
                        let entries = (next..next + count).map(|i| normal(i, i * 10));
                        store.append_entries(entries).await.unwrap();
                        next += count;
                    }
                }
                let from = rng.random_range(first.saturating_sub(2)..next + 2);
                let to = rng.random_range(from..next + 3);
                let ids = |entries: Vec<Entry>| -> Vec<(LogId, String)> {
                    entries
                        .iter()
                        .map(|e| (e.log_id, format!("{:?}", e.payload)))
                        .collect()
                };
                for (cached, disk) in [
                    (
                        store.try_get_log_entries(from..to).await.unwrap(),
                        on_disk.try_get_log_entries(from..to).await.unwrap(),
                    ),
                    (
                        store.try_get_log_entries(from..).await.unwrap(),
                        on_disk.try_get_log_entries(from..).await.unwrap(),
                    ),
                ] {
                    assert_eq!(ids(cached), ids(disk), "step {step}, from {from} to {to}");
                }
                if store.recent().get(from, Some(to)).is_some() {
                    served += 1;
                } else {
                    fell_back += 1;
                }
            }
            assert!(
                served > 500 && fell_back > 100,
                "{served} served, {fell_back} read"
            );
        });
    }

    #[test]
    fn the_latest_stamp_is_read_back_past_entries_without_one() {
        use openraft_rt::AsyncRuntime;
        crate::runtime::LedgerRuntime::run(async {
            let store = RaftLogStore::new(std::sync::Arc::new(crate::disk::SimDisk::new()));
            assert_eq!(store.latest_stamp().await.expect("reads"), None);
            let mut entries = vec![normal(1, 1_000), normal(2, 2_000)];
            entries.extend((3..=40).map(blank));
            store.append_entries(entries).await.expect("appends");
            assert_eq!(
                store.latest_stamp().await.expect("reads"),
                Some(Stamp::at(2_000))
            );
            let only_blank = RaftLogStore::new(std::sync::Arc::new(crate::disk::SimDisk::new()));
            only_blank
                .append_entries((1..=20).map(blank))
                .await
                .expect("appends");
            assert_eq!(only_blank.latest_stamp().await.expect("reads"), None);
        });
    }

    #[test]
    fn a_v2_entry_keeps_its_bounds_on_real_time() {
        let stamp = Stamp {
            ledger_ms: 5_000,
            real_ms_min: 65_000,
            real_ms_max: 69_000,
        };
        let entry = openraft::Entry {
            log_id: log_id(4),
            payload: EntryPayload::Normal(LedgerRequest {
                stamp,
                commands: Vec::new().into(),
            }),
        };
        let bytes = encode(&StoredEntry::V2(entry.clone()), "log entry").expect("encodes");
        assert_eq!(decode_entry(&log_key(4), &bytes).expect("decodes"), entry);
    }
}
