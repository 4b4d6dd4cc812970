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
//! A follower spools a received stream to the disk piece by piece ([`SnapshotSpool`],
//! under its own key prefix after the generations) and installs from there, so neither
//! side ever holds a whole snapshot in memory.
//!
//! Installing writes the received stream into the other generation (cleared first) in
//! batches, checking every entry through [`Restore`], then in one synced batch records
//! its applied log id and makes it the live generation; only then is the old generation
//! deleted. A power failure mid-install leaves the old generation live and the partial
//! one is cleared at the next open.

use std::sync::Arc;

use ledger_core::snapshot::{put_frame, Frames, Restore, HEADER};
use ledger_core::store::Table;
use serde::{Deserialize, Serialize};

use crate::codec::{decode, encode, seal};
use crate::disk::{DiskRef, DiskView, Keyspace, WriteBatch};
use crate::error::StoreError;
use crate::ledger_store::{disk_key, generation_range, opened, table_end, DiskStore};
use crate::types::{LogId, SnapshotMeta, StoredMembership};

/// Key in [`Keyspace::Meta`] of the live generation.
const GENERATION_KEY: &[u8] = b"state_generation";
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

/// Deletes every generation but `live` (what a crashed install left), and every
/// snapshot spool (what a crashed reception left).
pub(crate) fn clear_other_generations(disk: &DiskRef, live: u8) -> Result<(), StoreError> {
    let (from, to) = generation_range(1 - live);
    let mut batch = WriteBatch::new();
    batch.delete_range(Keyspace::State, from, to);
    batch.delete_range(Keyspace::State, [SPOOL], [SPOOL + 1]);
    disk.write(batch)?;
    Ok(())
}

/// First key byte of received snapshot streams, after the two generations.
const SPOOL: u8 = 2;

fn spool_key(id: u64, seq: u64) -> Vec<u8> {
    let mut key = vec![SPOOL];
    key.extend_from_slice(&id.to_be_bytes());
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// Deletes spool `id` when the last handle on it goes.
struct SpoolGuard {
    disk: DiskRef,
    id: u64,
}

impl Drop for SpoolGuard {
    fn drop(&mut self) {
        let mut batch = WriteBatch::new();
        batch.delete_range(
            Keyspace::State,
            spool_key(self.id, 0),
            spool_key(self.id, u64::MAX),
        );
        // A spool left behind is cleared at the next open.
        if let Err(e) = self.disk.write(batch) {
            tracing::warn!("snapshot spool {} not deleted: {e}", self.id);
        }
    }
}

/// A snapshot stream being received, written to the disk chunk by chunk as it arrives so
/// that a large snapshot is never held in memory ([`SnapshotSpool::finish`] makes it
/// snapshot data).
pub struct SnapshotSpool {
    guard: Arc<SpoolGuard>,
    chunks: u64,
}

impl SnapshotSpool {
    pub(crate) fn new(disk: DiskRef, id: u64) -> SnapshotSpool {
        SnapshotSpool {
            guard: Arc::new(SpoolGuard { disk, id }),
            chunks: 0,
        }
    }

    /// Keeps the next piece of the stream (blocking). Not synced: a spool does not
    /// outlive the process.
    pub fn push(&mut self, piece: Vec<u8>) -> Result<(), StoreError> {
        let mut batch = WriteBatch::new();
        batch.put(
            Keyspace::State,
            spool_key(self.guard.id, self.chunks),
            seal(piece),
        );
        self.guard.disk.write(batch)?;
        self.chunks += 1;
        Ok(())
    }

    /// The received stream as snapshot data.
    pub fn finish(self) -> SnapshotData {
        SnapshotData(Source::Spooled {
            guard: self.guard,
            chunks: self.chunks,
        })
    }
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
    Spooled {
        guard: Arc<SpoolGuard>,
        chunks: u64,
    },
}

impl std::fmt::Debug for SnapshotData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Source::View { meta, .. } => write!(f, "SnapshotData::View({meta})"),
            Source::Bytes(b) => write!(f, "SnapshotData::Bytes({} bytes)", b.len()),
            Source::Spooled { chunks, .. } => write!(f, "SnapshotData::Spooled({chunks} chunks)"),
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
            Source::Spooled { guard, chunks } => Chunking::Spooled {
                guard: guard.clone(),
                next: 0,
                chunks: *chunks,
            },
            Source::View {
                view,
                generation,
                meta,
            } => {
                let mut head = stream_head(meta)?;
                head.extend_from_slice(&HEADER);
                Chunking::View {
                    view: view.clone(),
                    generation: *generation,
                    head,
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
    Spooled {
        guard: Arc<SpoolGuard>,
        next: u64,
        chunks: u64,
    },
    View {
        view: Arc<dyn DiskView>,
        generation: u8,
        /// What goes before the first frame, not yet returned.
        head: Vec<u8>,
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

    /// The next piece of about `max_bytes` (a view's page is never split, and a spooled
    /// stream comes in the pieces it was received in), `None` at the end (blocking).
    pub fn next_chunk(&mut self, max_bytes: usize) -> Result<Option<Vec<u8>>, StoreError> {
        match &mut self.0 {
            Chunking::Bytes { bytes, at } => {
                let end = (*at + max_bytes).min(bytes.len());
                let chunk = bytes[*at..end].to_vec();
                *at = end;
                Ok((!chunk.is_empty()).then_some(chunk))
            }
            // Pieces as they were received, whatever their size.
            Chunking::Spooled {
                guard,
                next,
                chunks,
            } => {
                if *next == *chunks {
                    return Ok(None);
                }
                let stored = guard
                    .disk
                    .get(Keyspace::State, &spool_key(guard.id, *next))?
                    .ok_or_else(|| {
                        StoreError::Inconsistent(format!("snapshot spool lost piece {next}"))
                    })?;
                let piece = opened(&stored).map_err(StoreError::Damaged)?;
                *next += 1;
                Ok(Some(piece))
            }
            Chunking::View {
                view,
                generation,
                head,
                table,
                cursor,
            } => {
                let mut out = std::mem::take(head);
                while out.len() < max_bytes && *table < Table::PRIMARY.len() {
                    let t = Table::PRIMARY[*table];
                    let from = disk_key(*generation, t, cursor);
                    let to = table_end(*generation, t);
                    let page = view.range(&from, Some(&to), VIEW_PAGE)?;
                    for (key, stored) in &page {
                        // Damaged data is never sent: the stream stops with an error.
                        let value = opened(stored).map_err(StoreError::Damaged)?;
                        put_frame(&mut out, t, &key[2..], &value);
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

/// Installs `data` into the generation after `live` and makes it live; returns it.
/// `meta` is what openraft says the snapshot covers; the stream must say the same.
/// Blocking.
pub(crate) fn install(
    disk: &DiskRef,
    live: u8,
    meta: &SnapshotMeta,
    data: &SnapshotData,
) -> Result<u8, StoreError> {
    let target = 1 - live;
    // Only the generation: the stream itself may be in a spool.
    let (from, to) = generation_range(target);
    let mut batch = WriteBatch::new();
    batch.delete_range(Keyspace::State, from, to);
    disk.write(batch)?;
    let mut header = StreamHeader::default();
    let mut frames = Frames::new();
    let mut restore = Restore::new(DiskStore::new(disk.clone(), target));
    let mut chunks = data.chunks()?;
    while let Some(chunk) = chunks.next_chunk(1 << 20)? {
        frames.extend(header.feed(&chunk)?);
        while let Some((table, key, value)) =
            frames.next_frame().map_err(StoreError::SnapshotRefused)?
        {
            restore
                .push(table, &key, &value)
                .map_err(StoreError::SnapshotRefused)?;
            if restore.store_mut().pending_writes() >= INSTALL_BATCH_WRITES {
                flush(restore.store_mut())?;
            }
        }
    }
    frames.finish().map_err(StoreError::SnapshotRefused)?;
    let decoded = header
        .meta
        .ok_or_else(|| StoreError::Inconsistent("snapshot stream without a header".into()))?;
    if decoded != *meta {
        return Err(StoreError::Inconsistent(format!(
            "snapshot data covers {decoded}, its metadata says {meta}"
        )));
    }
    let mut ledger = restore.finish().map_err(StoreError::SnapshotRefused)?;
    let store = ledger.store_mut();
    let mut batch = WriteBatch::new();
    store.take_writes(&mut batch);
    if let Some(fault) = store.fault() {
        return Err(fault);
    }
    put_applied(&mut batch, target, &meta.last_log_id, &meta.last_membership)?;
    batch.put(Keyspace::Meta, GENERATION_KEY, vec![target]);
    disk.write(batch)?;
    disk.sync()?;
    Ok(target)
}

fn flush(store: &mut DiskStore) -> Result<(), StoreError> {
    if let Some(fault) = store.fault() {
        return Err(fault);
    }
    let mut batch = WriteBatch::new();
    store.take_writes(&mut batch);
    store.disk().write(batch)?;
    Ok(())
}
