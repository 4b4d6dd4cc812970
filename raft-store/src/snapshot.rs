//! Snapshots of the ledger on disk: where the applied position is kept, how a snapshot
//! is streamed from a point-in-time view, and how one is installed by streaming it into
//! the other generation and swapping.
//!
//! The state lives in generation 0 or 1 of [`Keyspace::State`]; [`Keyspace::Meta`]
//! names the live one. Each generation keeps its own applied log id and membership
//! (under table id 0), written in the same batch as every apply, so a restart resumes
//! from the disk without loading or re-applying anything.
//!
//! A snapshot is built without copying the state: it is a [`DiskView`] taken while no
//! apply is being committed, so it shows exactly the state at its applied log id, and is
//! encoded only as it is sent ([`SnapshotChunks`]). Applies go on meanwhile. The stream
//! is `LRS1 | meta length (u32 BE) | meta | ledger snapshot stream` (see
//! [`ledger_core::snapshot`]).
//!
//! A follower restores a received stream as it arrives ([`SnapshotReceiver`]): each piece
//! is checked through [`Restore`] and written in batches into the generation that is not
//! live (cleared first), so neither side ever holds a whole snapshot, and the stream is
//! written once, where it will be served from. Installing it then records its applied log
//! id and makes it the live generation in one synced batch; only then is the old
//! generation deleted. A power failure mid-reception or mid-install leaves the old
//! generation live, and the partial one is cleared at the next open. A stream that
//! another took over (a newer leader's) writes nothing more ([`Standby`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ledger_core::snapshot::{Frames, Restore, StreamWriter};
use ledger_core::store::Table;
use serde::{Deserialize, Serialize};

use crate::codec::{decode, encode};
use crate::disk::{DiskRef, DiskView, Keyspace, WriteBatch};
use crate::error::StoreError;
use crate::ledger_store::{disk_key, generation_range, opened, table_end, DiskStore};
use crate::types::{LogId, SnapshotMeta, StoredMembership};

/// Key in [`Keyspace::Meta`] of the live generation.
const GENERATION_KEY: &[u8] = b"state_generation";
/// Key in [`Keyspace::Meta`] of the number of the last [`Standby`] opened on the disk.
const INCARNATION_KEY: &[u8] = b"standby_incarnation";
/// Key of the applied position, in table id 0 of a generation.
const APPLIED_KEY: &[u8] = b"applied";
/// Magic of a snapshot stream.
const STREAM_MAGIC: [u8; 4] = *b"LRS1";
/// Entries restored per write batch while installing.
const INSTALL_BATCH_WRITES: usize = 4_096;
/// Entries read per page from a view while streaming.
const VIEW_PAGE: usize = 1_024;

/// The applied position of a generation.
#[derive(Serialize, Deserialize)]
enum AppliedRecord {
    V1 {
        last_applied: Option<LogId>,
        membership: StoredMembership,
    },
}

fn applied_key(generation: u8) -> Vec<u8> {
    let mut key = vec![generation, 0];
    key.extend_from_slice(APPLIED_KEY);
    key
}

/// The live generation (0 on a new disk).
pub(crate) fn read_generation(disk: &DiskRef) -> Result<u8, StoreError> {
    match disk.get(Keyspace::Meta, GENERATION_KEY)?.as_deref() {
        None => Ok(0),
        Some([g @ (0 | 1)]) => Ok(*g),
        Some(other) => Err(StoreError::Inconsistent(format!(
            "live state generation {other:?}"
        ))),
    }
}

/// The number of the last [`Standby`] opened on `disk` (0 on a new disk).
fn read_incarnation(disk: &DiskRef) -> Result<u64, StoreError> {
    match disk.get(Keyspace::Meta, INCARNATION_KEY)? {
        None => Ok(0),
        Some(bytes) => <[u8; 8]>::try_from(&bytes[..])
            .map(u64::from_be_bytes)
            .map_err(|_| StoreError::Inconsistent(format!("standby incarnation {bytes:?}"))),
    }
}

/// The applied position of `generation` (nothing applied on a new disk).
pub(crate) fn read_applied(
    disk: &DiskRef,
    generation: u8,
) -> Result<(Option<LogId>, StoredMembership), StoreError> {
    match disk.get(Keyspace::State, &applied_key(generation))? {
        None => Ok((None, StoredMembership::default())),
        Some(bytes) => {
            let AppliedRecord::V1 {
                last_applied,
                membership,
            } = decode(&bytes, "applied position")?;
            Ok((last_applied, membership))
        }
    }
}

/// Adds the applied position of `generation` to `batch`.
pub(crate) fn put_applied(
    batch: &mut WriteBatch,
    generation: u8,
    last_applied: &Option<LogId>,
    membership: &StoredMembership,
) -> Result<(), StoreError> {
    let record = AppliedRecord::V1 {
        last_applied: *last_applied,
        membership: membership.clone(),
    };
    batch.put(
        Keyspace::State,
        applied_key(generation),
        encode(&record, "applied position")?,
    );
    Ok(())
}

/// Deletes every generation but `live` (what a crashed reception or install left), and
/// any snapshot spool an earlier version left.
pub(crate) fn clear_other_generations(disk: &DiskRef, live: u8) -> Result<(), StoreError> {
    let (from, to) = generation_range(1 - live);
    delete_ranges_in_use(disk, &[(&from, &to), (&[SPOOL], &[SPOOL + 1])])
}

/// Deletes each `[from, to)` of the state in which a key is stored, in one batch, and
/// writes nothing when none holds a key. A range deletion is not free once written: until
/// the memtable holding it is flushed, RocksDB skips that memtable's bloom filter when it
/// reads keys together (`get_many`, how an apply reads), so absent keys are searched for
/// in the memtable; deleting empty ranges at every start paid that for nothing.
fn delete_ranges_in_use(disk: &DiskRef, ranges: &[(&[u8], &[u8])]) -> Result<(), StoreError> {
    let mut batch = WriteBatch::new();
    for &(from, to) in ranges {
        if !disk.range(Keyspace::State, from, Some(to), 1)?.is_empty() {
            batch.delete_range(Keyspace::State, from, to);
        }
    }
    if !batch.is_empty() {
        disk.write(batch)?;
    }
    Ok(())
}

/// First key byte under which earlier versions spooled received snapshot streams; a
/// spool left on an upgraded disk is cleared at open.
const SPOOL: u8 = 2;

/// Deletes generation `generation` (blocking).
fn clear(disk: &DiskRef, generation: u8) -> Result<(), StoreError> {
    let (from, to) = generation_range(generation);
    delete_ranges_in_use(disk, &[(&from, &to)])
}

/// The generation that is not live, which snapshots are received into, and which
/// receiver may write it: the one begun last. Shared by a state machine and its readers.
///
/// Every write to the standby generation, and the swap that makes it live, happens under
/// its lock and only for the receiver that owns it, so a stream that a later one took
/// over writes nothing more, and a new stream never clears a generation readers are
/// still on (see [`Received::commit`]). A stream received whole is not taken over while
/// it waits to be installed: a new one is turned away until openraft has installed or
/// dropped it, and its sender tries again later.
///
/// Ownership is the disk's, not only this value's: each `Standby` opened on a disk takes
/// the next incarnation number and stores it there, and every write, clear and swap first
/// checks that the disk still holds its number. A state machine left over from before a
/// restart on the same disk (the simulation restarts a node on its disk while the old
/// instance's tasks may not yet have been dropped) can then neither write into, clear nor
/// swap in the generation the new one receives into.
pub(crate) struct Standby {
    disk: DiskRef,
    incarnation: u64,
    owner: Mutex<Owner>,
    ids: AtomicU64,
}

/// Who may write the standby generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// Nobody: the next stream may begin.
    Free,
    /// The receiver with this id, its stream still arriving.
    Receiving(u64),
    /// The receiver with this id, its stream received whole and waiting to be installed.
    Received(u64),
    /// A received stream is being made live. Left so when that fails half-way: the disk
    /// may already name the standby generation live while the state machine reads the
    /// other, so neither may be written or cleared until the node reopens its disk.
    Committing,
}

impl Owner {
    /// The receiver that holds the standby generation, if any.
    fn holder(self) -> Option<u64> {
        match self {
            Owner::Receiving(id) | Owner::Received(id) => Some(id),
            Owner::Free | Owner::Committing => None,
        }
    }
}

impl Standby {
    /// The standby generation of `disk`, taken from any earlier `Standby` on it (blocking:
    /// one synced write).
    pub(crate) fn open(disk: DiskRef) -> Result<Arc<Standby>, StoreError> {
        let incarnation = read_incarnation(&disk)?.wrapping_add(1);
        let mut batch = WriteBatch::new();
        batch.put(
            Keyspace::Meta,
            INCARNATION_KEY,
            incarnation.to_be_bytes().to_vec(),
        );
        disk.write(batch)?;
        disk.sync()?;
        Ok(Arc::new(Standby {
            disk,
            incarnation,
            owner: Mutex::new(Owner::Free),
            ids: AtomicU64::new(1),
        }))
    }

    /// An error unless this is the last `Standby` opened on the disk.
    fn check_incarnation(&self) -> Result<(), StoreError> {
        if read_incarnation(&self.disk)? == self.incarnation {
            Ok(())
        } else {
            Err(StoreError::SnapshotBusy(
                "the disk was opened again since this state machine opened it",
            ))
        }
    }

    fn lock(&self) -> MutexGuard<'_, Owner> {
        // Only a copyable state is kept under the lock: a panic cannot leave it half
        // changed.
        self.owner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Begins receiving a snapshot stream into the standby generation, cleared first;
    /// a stream begun earlier can write nothing more (blocking).
    pub(crate) fn receive(self: &Arc<Self>) -> Result<SnapshotReceiver, StoreError> {
        let mut owner = self.lock();
        match *owner {
            Owner::Free | Owner::Receiving(_) => {}
            Owner::Received(_) => {
                return Err(StoreError::SnapshotBusy(
                    "a snapshot received whole waits to be installed",
                ))
            }
            Owner::Committing => {
                return Err(StoreError::SnapshotBusy(
                    "a snapshot install did not finish; the node must reopen its disk",
                ))
            }
        }
        self.check_incarnation()?;
        let target = 1 - read_generation(&self.disk)?;
        clear(&self.disk, target)?;
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        *owner = Owner::Receiving(id);
        Ok(SnapshotReceiver {
            claim: Arc::new(Claim {
                standby: self.clone(),
                id,
                target,
            }),
            header: StreamHeader::default(),
            frames: Frames::new(),
            restore: Restore::new(DiskStore::new(self.disk.clone(), target)),
        })
    }
}

/// A receiver's hold on the standby generation. When the last handle goes without the
/// snapshot having been made live, what it wrote is deleted (if a later stream has not
/// already cleared it); a crash leaves it to the next open.
struct Claim {
    standby: Arc<Standby>,
    id: u64,
    target: u8,
}

impl Claim {
    /// Runs `write` (a write to the standby generation) while this claim owns it.
    fn write(&self, write: impl FnOnce() -> Result<(), StoreError>) -> Result<(), StoreError> {
        let owner = self.standby.lock();
        if *owner != Owner::Receiving(self.id) {
            return Err(superseded());
        }
        self.standby.check_incarnation()?;
        write()
    }

    /// Marks the stream received whole: no later stream takes it over from now on.
    fn finished(&self) -> Result<(), StoreError> {
        let mut owner = self.standby.lock();
        if *owner != Owner::Receiving(self.id) {
            return Err(superseded());
        }
        *owner = Owner::Received(self.id);
        Ok(())
    }
}

fn superseded() -> StoreError {
    StoreError::SnapshotBusy("a later snapshot stream took over the standby generation")
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut owner = self.standby.lock();
        if owner.holder() != Some(self.id) {
            return;
        }
        *owner = Owner::Free;
        // Not once the disk was opened again: the generation is a later instance's now.
        let cleared = self
            .standby
            .check_incarnation()
            .and_then(|()| clear(&self.standby.disk, self.target));
        if let Err(e) = cleared {
            tracing::warn!(
                "a snapshot not installed was left in generation {}: {e}",
                self.target
            );
        }
    }
}

/// A snapshot stream being received: each piece is checked and restored into the standby
/// generation as it arrives, so the stream is never held whole, in memory or on disk
/// ([`SnapshotReceiver::finish`] makes it snapshot data ready to install).
pub struct SnapshotReceiver {
    claim: Arc<Claim>,
    header: StreamHeader,
    frames: Frames,
    restore: Restore<DiskStore>,
}

impl SnapshotReceiver {
    /// Restores the next piece of the stream (blocking). An error when the stream is not
    /// a valid snapshot, or when a later stream took over.
    pub fn push(&mut self, piece: &[u8]) -> Result<(), StoreError> {
        // Even a piece that fills no batch is refused once the stream was taken over.
        self.claim.write(|| Ok(()))?;
        let state = self.header.feed(piece)?;
        self.frames.extend(state);
        while let Some((table, key, value)) = self
            .frames
            .next_frame()
            .map_err(StoreError::SnapshotRefused)?
        {
            self.restore
                .push(table, &key, &value)
                .map_err(StoreError::SnapshotRefused)?;
            if self.restore.store_mut().pending_writes() >= INSTALL_BATCH_WRITES {
                flush(&self.claim, self.restore.store_mut())?;
            }
        }
        Ok(())
    }

    /// The whole stream, received: snapshot data ready to install at `expected` (blocking).
    /// An error when the stream was cut short, or covers other than `expected` (what the
    /// sender said it sends), so that openraft is never handed data its metadata
    /// contradicts.
    pub fn finish(self, expected: &SnapshotMeta) -> Result<SnapshotData, StoreError> {
        self.frames.finish().map_err(StoreError::SnapshotRefused)?;
        let meta = self
            .header
            .meta
            .ok_or_else(|| StoreError::Inconsistent("snapshot stream without a header".into()))?;
        if meta != *expected {
            return Err(StoreError::Inconsistent(format!(
                "snapshot stream covers {meta}, its sender says {expected}"
            )));
        }
        let mut ledger = self.restore.finish().map_err(StoreError::SnapshotRefused)?;
        flush(&self.claim, ledger.store_mut())?;
        self.claim.finished()?;
        Ok(SnapshotData(Source::Received(Arc::new(Received {
            claim: self.claim,
            meta,
        }))))
    }
}

/// Commits what `store` has pending to the standby generation `claim` holds.
fn flush(claim: &Claim, store: &mut DiskStore) -> Result<(), StoreError> {
    if let Some(fault) = store.fault() {
        return Err(fault);
    }
    let mut batch = WriteBatch::new();
    store.take_writes(&mut batch);
    claim.write(|| Ok(store.disk().write(batch)?))
}

/// A snapshot received whole into the standby generation.
struct Received {
    claim: Arc<Claim>,
    /// What the stream's header says it covers.
    meta: SnapshotMeta,
}

impl Received {
    /// Makes the received snapshot the live state, if `meta` (what openraft says it
    /// covers) is what its stream said: its applied position and the generation swap in
    /// one synced batch; then `swapped` moves the state machine to it, before any later
    /// stream may clear the generation it leaves; then that generation is deleted.
    /// Returns the new live generation (blocking).
    fn commit(
        &self,
        meta: &SnapshotMeta,
        swapped: impl FnOnce(u8) -> Result<(), StoreError>,
    ) -> Result<u8, StoreError> {
        if self.meta != *meta {
            return Err(StoreError::Inconsistent(format!(
                "snapshot data covers {}, its metadata says {meta}",
                self.meta
            )));
        }
        let standby = &self.claim.standby;
        let target = self.claim.target;
        let mut owner = standby.lock();
        if *owner != Owner::Received(self.claim.id) {
            return Err(superseded());
        }
        standby.check_incarnation()?;
        // From the write below the disk may name the standby generation live, even if
        // the write or its sync then fails: dropping the claim must leave it, and no
        // stream may clear either generation until this commit has finished.
        *owner = Owner::Committing;
        let mut batch = WriteBatch::new();
        put_applied(&mut batch, target, &meta.last_log_id, &meta.last_membership)?;
        batch.put(Keyspace::Meta, GENERATION_KEY, vec![target]);
        standby.disk.write(batch)?;
        standby.disk.sync()?;
        swapped(target)?;
        *owner = Owner::Free;
        clear(&standby.disk, 1 - target)?;
        Ok(target)
    }
}

/// Installs `data` as the live state at `meta`: a snapshot received into the standby
/// generation is made live; any other data is received there first. `swapped` is told
/// the new live generation as it becomes live (see [`Received::commit`]). Blocking.
pub(crate) fn install(
    standby: &Arc<Standby>,
    meta: &SnapshotMeta,
    data: &SnapshotData,
    swapped: impl FnOnce(u8) -> Result<(), StoreError>,
) -> Result<u8, StoreError> {
    let received = match &data.0 {
        Source::Received(received) => received.clone(),
        _ => {
            let mut receiver = standby.receive()?;
            let mut chunks = data.chunks()?;
            while let Some(chunk) = chunks.next_chunk(1 << 20)? {
                receiver.push(&chunk)?;
            }
            match receiver.finish(meta)?.0 {
                Source::Received(received) => received,
                _ => unreachable!("a receiver finishes with received data"),
            }
        }
    };
    received.commit(meta, swapped)
}

/// Snapshot data: a view of this node's state, or a stream received from the leader.
/// Cheap to clone.
#[derive(Clone)]
pub struct SnapshotData(Source);

#[derive(Clone)]
enum Source {
    View {
        view: Arc<dyn DiskView>,
        generation: u8,
        meta: SnapshotMeta,
    },
    Bytes(Arc<Vec<u8>>),
    Received(Arc<Received>),
}

impl std::fmt::Debug for SnapshotData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Source::View { meta, .. } => write!(f, "SnapshotData::View({meta})"),
            Source::Bytes(b) => write!(f, "SnapshotData::Bytes({} bytes)", b.len()),
            Source::Received(received) => {
                write!(f, "SnapshotData::Received({})", received.meta)
            }
        }
    }
}

impl SnapshotData {
    /// A stream received whole.
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        SnapshotData(Source::Bytes(Arc::new(bytes)))
    }

    /// `generation` of `view`, at `meta`.
    pub(crate) fn view(view: Box<dyn DiskView>, generation: u8, meta: SnapshotMeta) -> Self {
        SnapshotData(Source::View {
            view: Arc::from(view),
            generation,
            meta,
        })
    }

    /// Reads the stream from its start, in chunks (blocking: reads the disk).
    pub fn chunks(&self) -> Result<SnapshotChunks, StoreError> {
        let source = match &self.0 {
            Source::Bytes(bytes) => Chunking::Bytes {
                bytes: bytes.clone(),
                at: 0,
            },
            // Already restored; installing it is all that is left to do with it.
            Source::Received(_) => {
                return Err(StoreError::Inconsistent(
                    "a received snapshot is installed, not read back".into(),
                ))
            }
            Source::View {
                view,
                generation,
                meta,
            } => {
                let mut head = stream_head(meta)?;
                let writer = StreamWriter::start(&mut head);
                Chunking::View {
                    view: view.clone(),
                    generation: *generation,
                    head,
                    writer: Some(writer),
                    table: 0,
                    cursor: Vec::new(),
                }
            }
        };
        Ok(SnapshotChunks(source))
    }

    /// The whole stream in one buffer (blocking).
    pub fn to_bytes(&self) -> Result<Vec<u8>, StoreError> {
        let mut chunks = self.chunks()?;
        let mut out = Vec::new();
        while let Some(chunk) = chunks.next_chunk(1 << 20)? {
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }
}

/// A snapshot stream being read (see [`SnapshotData::chunks`]).
pub struct SnapshotChunks(Chunking);

enum Chunking {
    Bytes {
        bytes: Arc<Vec<u8>>,
        at: usize,
    },
    View {
        view: Arc<dyn DiskView>,
        generation: u8,
        /// What goes before the first frame, not yet returned.
        head: Vec<u8>,
        /// Frames the stream and ends it; `None` once the end frame is written.
        writer: Option<StreamWriter>,
        /// Position in [`Table::PRIMARY`] of the table being read.
        table: usize,
        /// The next key to read in it.
        cursor: Vec<u8>,
    },
}

impl SnapshotChunks {
    /// The rest of the stream as an async stream of pieces of about `max_bytes`, each
    /// read off the async runtime; it ends after the first error.
    pub fn into_stream(
        self,
        max_bytes: usize,
    ) -> impl futures::Stream<Item = Result<Vec<u8>, StoreError>> + Send + 'static {
        futures::stream::unfold(Some(self), move |chunks| async move {
            let mut chunks = chunks?;
            let (chunks, read) = crate::runtime::blocking(move || {
                let read = chunks.next_chunk(max_bytes);
                (chunks, read)
            })
            .await;
            match read {
                Ok(Some(piece)) => Some((Ok(piece), Some(chunks))),
                Ok(None) => None,
                Err(e) => Some((Err(e), None)),
            }
        })
    }

    /// The next piece of about `max_bytes` (a view's page is never split), `None` at the
    /// end (blocking).
    pub fn next_chunk(&mut self, max_bytes: usize) -> Result<Option<Vec<u8>>, StoreError> {
        match &mut self.0 {
            Chunking::Bytes { bytes, at } => {
                let end = (*at + max_bytes).min(bytes.len());
                let chunk = bytes[*at..end].to_vec();
                *at = end;
                Ok((!chunk.is_empty()).then_some(chunk))
            }
            Chunking::View {
                view,
                generation,
                head,
                writer,
                table,
                cursor,
            } => {
                let mut out = std::mem::take(head);
                let Some(frames) = writer else {
                    return Ok(None);
                };
                while out.len() < max_bytes && *table < Table::PRIMARY.len() {
                    let t = Table::PRIMARY[*table];
                    let from = disk_key(*generation, t, cursor);
                    let to = table_end(*generation, t);
                    let page = view.range(&from, Some(&to), VIEW_PAGE)?;
                    for (key, stored) in &page {
                        // Damaged data is never sent: the stream stops with an error.
                        let value = opened(stored).map_err(StoreError::Damaged)?;
                        frames.frame(&mut out, t, &key[2..], &value);
                    }
                    match page.last() {
                        Some((last, _)) if page.len() == VIEW_PAGE => {
                            *cursor = last[2..].to_vec();
                            cursor.push(0);
                        }
                        _ => {
                            *table += 1;
                            cursor.clear();
                        }
                    }
                }
                if *table == Table::PRIMARY.len() {
                    if let Some(frames) = writer.take() {
                        frames.end(&mut out);
                    }
                }
                Ok((!out.is_empty()).then_some(out))
            }
        }
    }
}

/// Where a received stream is in its own header.
#[derive(Default)]
struct StreamHeader {
    buffer: Vec<u8>,
    meta: Option<SnapshotMeta>,
}

/// Follows a snapshot stream piece by piece: the metadata in its header, and the SHA-256
/// of what follows the header (the ledger's snapshot, whose SHA-256 is its
/// `Ledger::state_digest`).
#[derive(Default)]
pub struct StreamDigest {
    header: StreamHeader,
    hasher: sha2::Sha256,
}

impl StreamDigest {
    /// Nothing read yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the next piece; an error when the stream does not start as a snapshot.
    pub fn feed(&mut self, piece: &[u8]) -> Result<(), StoreError> {
        let state = self.header.feed(piece)?;
        sha2::Digest::update(&mut self.hasher, state);
        Ok(())
    }

    /// The metadata, once the header was read.
    pub fn meta(&self) -> Option<&SnapshotMeta> {
        self.header.meta.as_ref()
    }

    /// The state digest of everything read.
    pub fn finish(self) -> [u8; 32] {
        sha2::Digest::finalize(self.hasher).into()
    }
}

/// The first bytes of a snapshot stream for `meta`, before the ledger's snapshot.
pub(crate) fn stream_head(meta: &SnapshotMeta) -> Result<Vec<u8>, StoreError> {
    let mut head = STREAM_MAGIC.to_vec();
    let meta = encode(meta, "snapshot meta")?;
    head.extend_from_slice(&(meta.len() as u32).to_be_bytes());
    head.extend_from_slice(&meta);
    Ok(head)
}

impl StreamHeader {
    /// Takes header bytes from `piece`; returns what follows the header once it is read.
    fn feed<'a>(&mut self, piece: &'a [u8]) -> Result<&'a [u8], StoreError> {
        if self.meta.is_some() {
            return Ok(piece);
        }
        let before = self.buffer.len();
        self.buffer.extend_from_slice(piece);
        if self.buffer.len() < 8 {
            return Ok(&[]);
        }
        if self.buffer[..4] != STREAM_MAGIC {
            return Err(StoreError::Inconsistent(format!(
                "snapshot stream starts with {:?}",
                &self.buffer[..4]
            )));
        }
        let len = u32::from_be_bytes(self.buffer[4..8].try_into().expect("4 bytes")) as usize;
        if self.buffer.len() < 8 + len {
            return Ok(&[]);
        }
        self.meta = Some(decode(&self.buffer[8..8 + len], "snapshot meta")?);
        Ok(&piece[8 + len - before..])
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::disk::SimDisk;

    /// At open, what another generation or an old spool left is deleted, the live
    /// generation is kept, and when nothing was left nothing is written: a range deletion
    /// of nothing would still turn off the memtable's bloom filter for the reads after it.
    #[test]
    fn other_generations_are_cleared_at_open_and_nothing_is_written_when_none_is_left() {
        let sim = Arc::new(SimDisk::new());
        let disk: DiskRef = sim.clone();
        let live = disk_key(0, Table::Records, b"kept");
        let mut batch = WriteBatch::new();
        batch.put(Keyspace::State, live.clone(), vec![1]);
        disk.write(batch).unwrap();
        disk.sync().unwrap();

        clear_other_generations(&disk, 0).unwrap();
        assert_eq!(
            sim.unsynced_batches().unwrap(),
            0,
            "nothing to clear, nothing written"
        );

        let mut batch = WriteBatch::new();
        batch.put(
            Keyspace::State,
            disk_key(1, Table::Records, b"left"),
            vec![2],
        );
        batch.put(Keyspace::State, [SPOOL, 7], vec![3]);
        disk.write(batch).unwrap();
        disk.sync().unwrap();

        clear_other_generations(&disk, 0).unwrap();
        assert_eq!(sim.unsynced_batches().unwrap(), 1);
        let (other_from, other_to) = generation_range(1);
        assert!(disk
            .range(Keyspace::State, &other_from, Some(&other_to), 10)
            .unwrap()
            .is_empty());
        assert!(disk
            .range(Keyspace::State, &[SPOOL], Some(&[SPOOL + 1]), 10)
            .unwrap()
            .is_empty());
        assert_eq!(disk.get(Keyspace::State, &live).unwrap(), Some(vec![1]));
    }
}
