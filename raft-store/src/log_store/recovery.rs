//! Opening a disk after a crash or a power failure: the storage format, a torn tail, and
//! damage.
//!
//! **Format.** [`STORAGE_FORMAT`] is recorded in [`Keyspace::Meta`] when a disk is first
//! opened. Format 1 (no record, no checksums) is refused rather than misread as
//! checksummed data: such a directory is wiped and its node added back to the cluster.
//!
//! **Torn tail or damage?** Every value carries a checksum (`codec`), so a value that a
//! torn write cut short or garbled and a value hit by a bit flip both fail it. The two
//! must be told apart: cutting a torn entry is required (it was never synced, hence never
//! acknowledged), but cutting or skipping a damaged synced entry would silently lose an
//! entry this node acknowledged, which Raft counts on (a Raft safety bug). Position alone
//! cannot tell them apart: the last entry of the log may be the last of a batch that was
//! synced and acknowledged, then flipped.
//!
//! So each append ends its write batch with the log's end (`log_end`, the batch's last
//! index) and a truncation sets it back. A torn write keeps a prefix of a batch's
//! operations in order, so the end is present and whole only if every entry before it in
//! the batch is on disk; and a batch that was synced is on disk whole. Hence:
//! - an entry past the recorded end belongs to a batch that never reached the disk
//!   whole, so was never synced nor acknowledged: the whole tail past the end is cut,
//!   whole entries and damaged ones alike;
//! - an entry at or before the end was written by a batch that reached the disk whole:
//!   if it fails its checksum, synced data is damaged, and opening fails with
//!   [`StoreError::Corrupt`] naming the entry;
//! - if the end itself is damaged, it was either the last value a torn append kept (every
//!   entry of that batch is then on disk whole) or a bit flip. Every entry is verified;
//!   if all are whole, none needs cutting and the end is rewritten as the last index
//!   (an entry that reached the disk whole may be kept even if it was never synced, as
//!   after any power failure). If one is damaged, opening fails.
//!
//! The other records: a damaged vote or last purged log id fails the open (forgetting a
//! vote is unsafe, and whether it was torn or flipped cannot be known). A damaged
//! committed log id is dropped: it is written without a sync, so a torn write may garble
//! it at any power failure, and without it the node only re-applies less before the
//! leader tells it the commit index again. A damaged snapshot fails the state machine's
//! open. Nothing damaged is ever served: reads after the open verify every value again.

use tracing::warn;

use serde::{Deserialize, Serialize};

use super::{
    decode_entry, decode_log_end, encode_log_end, log_key, StoredLogId, StoredVote, COMMITTED_KEY,
    LAST_PURGED_KEY, LOG_END_KEY, LOG_KEY_END, VOTE_KEY,
};
use crate::codec::{decode, encode};
use crate::disk::{DiskRef, Keyspace, WriteBatch};
use crate::error::StoreError;

/// The storage format this build reads and writes: 2, every value checksummed. Format 1
/// had no checksums and no format record.
pub const STORAGE_FORMAT: u32 = 2;

const FORMAT_KEY: &[u8] = b"format";

/// Entries read at a time while verifying the log.
const SCAN_CHUNK: usize = 256;

#[derive(Serialize, Deserialize)]
enum StoredFormat {
    V1(u32),
}

/// Checks the format, verifies the Raft records and the log, cuts a torn tail and
/// repairs what can be repaired safely, then syncs the repairs (blocking).
pub(super) fn recover(disk: &DiskRef) -> Result<(), StoreError> {
    check_format(disk)?;
    let mut repairs = WriteBatch::new();
    verify_meta(disk, &mut repairs)?;
    recover_log(disk, &mut repairs)?;
    if !repairs.is_empty() {
        disk.write(repairs)?;
        disk.sync()?;
    }
    Ok(())
}

fn check_format(disk: &DiskRef) -> Result<(), StoreError> {
    let unsupported = |found| StoreError::UnsupportedFormat {
        found,
        supported: STORAGE_FORMAT,
    };
    match disk.get(Keyspace::Meta, FORMAT_KEY)? {
        Some(bytes) => match decode(&bytes, "storage format") {
            Ok(StoredFormat::V1(STORAGE_FORMAT)) => Ok(()),
            Ok(StoredFormat::V1(found)) => Err(unsupported(Some(found))),
            // Stamping a fresh disk was torn: nothing else was ever written.
            Err(StoreError::Corrupt { .. }) if !holds_data(disk)? => stamp_format(disk),
            Err(error) => Err(error.at(Keyspace::Meta, FORMAT_KEY)),
        },
        None if holds_data(disk)? => Err(unsupported(None)),
        None => stamp_format(disk),
    }
}

/// Whether the disk holds anything besides the format record.
fn holds_data(disk: &DiskRef) -> Result<bool, StoreError> {
    for space in Keyspace::ALL {
        let pairs = disk.range(space, &[], None, 2)?;
        if pairs
            .iter()
            .any(|(key, _)| space != Keyspace::Meta || key != FORMAT_KEY)
        {
            return Ok(true);
        }
    }
    Ok(false)
}

fn stamp_format(disk: &DiskRef) -> Result<(), StoreError> {
    let mut batch = WriteBatch::new();
    batch.put(
        Keyspace::Meta,
        FORMAT_KEY,
        encode(&StoredFormat::V1(STORAGE_FORMAT), "storage format")?,
    );
    disk.write(batch)?;
    disk.sync()?;
    Ok(())
}

fn verify_meta(disk: &DiskRef, repairs: &mut WriteBatch) -> Result<(), StoreError> {
    if let Some(bytes) = disk.get(Keyspace::Meta, VOTE_KEY)? {
        let StoredVote::V1(_) =
            decode(&bytes, "vote").map_err(|e| e.at(Keyspace::Meta, VOTE_KEY))?;
    }
    if let Some(bytes) = disk.get(Keyspace::Meta, LAST_PURGED_KEY)? {
        let StoredLogId::V1(_) =
            decode(&bytes, "log id").map_err(|e| e.at(Keyspace::Meta, LAST_PURGED_KEY))?;
    }
    if let Some(bytes) = disk.get(Keyspace::Meta, COMMITTED_KEY)? {
        match decode::<StoredLogId>(&bytes, "committed log id") {
            Ok(StoredLogId::V1(_)) => {}
            Err(error @ StoreError::Corrupt { .. }) => {
                warn!(
                    "dropping the committed log id: {}",
                    error.at(Keyspace::Meta, COMMITTED_KEY)
                );
                repairs.delete(Keyspace::Meta, COMMITTED_KEY);
            }
            Err(error) => return Err(error.at(Keyspace::Meta, COMMITTED_KEY)),
        }
    }
    Ok(())
}

/// What the disk says about the log's end.
enum End {
    /// Entries past this index (all of them when `None`) are a torn tail.
    Known(Option<u64>),
    /// The record is damaged.
    Damaged,
}

fn recover_log(disk: &DiskRef, repairs: &mut WriteBatch) -> Result<(), StoreError> {
    let end = match disk.get(Keyspace::Meta, LOG_END_KEY)? {
        None => End::Known(None),
        Some(bytes) => match decode_log_end(&bytes) {
            Ok(end) => End::Known(end),
            Err(error @ StoreError::Corrupt { .. }) => {
                warn!("{error}; verifying the whole log to rebuild it");
                End::Damaged
            }
            Err(error) => return Err(error),
        },
    };
    let mut from = log_key(0).to_vec();
    let mut last = None;
    let mut torn_from = None;
    'scan: loop {
        let pairs = disk.range(Keyspace::Log, &from, None, SCAN_CHUNK)?;
        for (key, bytes) in &pairs {
            let index = <[u8; 8]>::try_from(&key[..])
                .map(u64::from_be_bytes)
                .map_err(|_| {
                    StoreError::Inconsistent(format!("log key {key:02x?} is not a log index"))
                })?;
            if let End::Known(end) = end {
                if end.is_none_or(|end| index > end) {
                    torn_from = Some(index);
                    break 'scan;
                }
            }
            decode_entry(key, bytes)?;
            last = Some(index);
        }
        match (
            pairs.len() < SCAN_CHUNK,
            last.and_then(|l: u64| l.checked_add(1)),
        ) {
            (false, Some(next)) => from = log_key(next).to_vec(),
            _ => break,
        }
    }
    if let Some(index) = torn_from {
        warn!("cutting the log's torn tail from index {index}: it was never synced");
        repairs.delete_range(Keyspace::Log, log_key(index), LOG_KEY_END);
    }
    if let End::Damaged = end {
        warn!("every log entry is whole; the log's end is rewritten as {last:?}");
        repairs.put(Keyspace::Meta, LOG_END_KEY, encode_log_end(last)?);
    }
    Ok(())
}
