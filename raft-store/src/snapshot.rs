//! Snapshot bytes: what a snapshot holds, how it is encoded, and where it is kept.
//!
//! A snapshot is the ledger's own deterministic snapshot ([`Ledger::to_snapshot`]) with
//! the last applied log id and the membership it belongs to, in a versioned enum. The
//! same bytes travel to followers, are installed, and are kept on disk under one key in
//! [`Keyspace::Snapshot`]; the metadata openraft needs is decoded from them, so it cannot
//! drift from the data. Decoding validates the ledger through [`Ledger::from_snapshot`],
//! which checks every record's invariants.

use ledger_core::Ledger;
use serde::{Deserialize, Serialize};

use crate::codec::{decode, encode};
use crate::disk::{DiskRef, Keyspace, WriteBatch};
use crate::error::StoreError;
use crate::types::{LogId, SnapshotMeta, StoredMembership};

const CURRENT_KEY: &[u8] = b"current";

#[derive(Serialize)]
enum PayloadRef<'a> {
    V1 {
        last_applied: &'a Option<LogId>,
        membership: &'a StoredMembership,
        ledger: &'a [u8],
    },
}

#[derive(Deserialize)]
enum Payload {
    V1 {
        last_applied: Option<LogId>,
        membership: StoredMembership,
        ledger: Vec<u8>,
    },
}

/// Encodes a snapshot of `ledger` taken after applying `last_applied`.
pub(crate) fn encode_snapshot(
    ledger: &Ledger,
    last_applied: &Option<LogId>,
    membership: &StoredMembership,
) -> Result<(SnapshotMeta, Vec<u8>), StoreError> {
    let ledger_bytes = ledger.to_snapshot();
    let payload = PayloadRef::V1 {
        last_applied,
        membership,
        ledger: &ledger_bytes,
    };
    let bytes = encode(&payload, "snapshot")?;
    let meta = SnapshotMeta {
        last_log_id: *last_applied,
        last_membership: membership.clone(),
    };
    Ok((meta, bytes))
}

fn decode_payload(bytes: &[u8]) -> Result<(SnapshotMeta, Vec<u8>), StoreError> {
    let Payload::V1 {
        last_applied,
        membership,
        ledger,
    } = decode(bytes, "snapshot")?;
    let meta = SnapshotMeta {
        last_log_id: last_applied,
        last_membership: membership,
    };
    Ok((meta, ledger))
}

/// The metadata of snapshot bytes, without rebuilding the ledger.
pub(crate) fn decode_meta(bytes: &[u8]) -> Result<SnapshotMeta, StoreError> {
    Ok(decode_payload(bytes)?.0)
}

/// Decodes snapshot bytes and rebuilds and validates the ledger.
pub(crate) fn decode_snapshot(bytes: &[u8]) -> Result<(SnapshotMeta, Ledger), StoreError> {
    let (meta, ledger_bytes) = decode_payload(bytes)?;
    let ledger = Ledger::from_snapshot(&ledger_bytes).map_err(StoreError::SnapshotRefused)?;
    Ok((meta, ledger))
}

/// Reads the kept snapshot's bytes (blocking).
pub(crate) fn read_current(disk: &DiskRef) -> Result<Option<Vec<u8>>, StoreError> {
    Ok(disk.get(Keyspace::Snapshot, CURRENT_KEY)?)
}

/// Replaces the kept snapshot and syncs (blocking).
pub(crate) fn write_current(disk: &DiskRef, bytes: Vec<u8>) -> Result<(), StoreError> {
    let mut batch = WriteBatch::new();
    batch.put(Keyspace::Snapshot, CURRENT_KEY, bytes);
    disk.write(batch)?;
    disk.sync()?;
    Ok(())
}
