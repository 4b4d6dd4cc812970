//! Backups of a whole ledger, and their restore into a new cluster.
//!
//! A backup is the snapshot stream Raft sends a follower ([`SnapshotData`]), taken from a
//! point-in-time view of the state ([`LedgerReader::backup`]): a header naming the log
//! position and membership it came from, then the ledger's snapshot, whose SHA-256 is the
//! state digest ([`StreamDigest`]). It is restored offline, into the data directory of a
//! node that has never been part of a cluster ([`restore`]), on every member of the new
//! cluster before it is formed: the state is installed as the state before the first log
//! entry, under no membership, so `init` forms the new cluster as usual and the records,
//! tombstones, remembered command ids, fencing tokens and ledger clock carry on.

use std::io::Read;

use openraft::storage::{RaftLogReader, RaftLogStorage};

use crate::disk::DiskRef;
use crate::error::StoreError;
use crate::runtime::blocking;
use crate::snapshot::{install, stream_head, SnapshotData, Standby, StreamDigest};
use crate::state_machine::LedgerReader;
use crate::types::SnapshotMeta;

/// The pieces a restore reads the backup in.
const RESTORE_PIECE_BYTES: usize = 1 << 20;
/// Largest metadata header accepted: a membership of any sane size fits.
const META_BYTES_MAX: usize = 1 << 20;

/// What a restore installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The log index the backup was taken at, in the cluster it came from.
    pub source_index: Option<u64>,
    /// The state digest of what was installed.
    pub state_digest: [u8; 32],
}

impl LedgerReader {
    /// The state as it is now, as a snapshot stream to save, and the log index it
    /// reflects; `None` before anything was applied. Reading the stream does not hold
    /// applies back.
    pub fn backup(&self) -> Result<Option<(SnapshotData, u64)>, StoreError> {
        Ok(self.snapshot_now()?.and_then(|snapshot| {
            let index = snapshot.meta.last_log_id?.index;
            Some((snapshot.snapshot, index))
        }))
    }
}

/// Installs the backup read from `backup` into the node whose storage is `disk`, which
/// must never have been part of a cluster: no log, no vote, nothing applied. The state is
/// installed before the first log entry and under no membership. Blocking.
pub async fn restore(
    disk: DiskRef,
    backup: impl Read + Send + 'static,
) -> Result<Restored, StoreError> {
    let (mut log_store, state_machine) = crate::open(disk.clone()).await?;
    let io = |e: std::io::Error| StoreError::Inconsistent(e.to_string());
    let log = log_store.get_log_state().await.map_err(io)?;
    let vote = log_store.read_vote().await.map_err(io)?;
    let applied = state_machine.reader().last_applied_index();
    if log.last_log_id.is_some() || vote.is_some() || applied.is_some() {
        return Err(StoreError::Inconsistent(
            "a backup is restored only into a node that has never been part of a cluster; \
             this data directory holds a Raft log, a vote or applied entries: use an empty one"
                .into(),
        ));
    }
    drop(state_machine);
    drop(log_store);
    blocking(move || restore_blocking(&disk, backup)).await
}

fn restore_blocking(disk: &DiskRef, mut backup: impl Read) -> Result<Restored, StoreError> {
    let io = |e: std::io::Error| StoreError::Inconsistent(format!("reading the backup: {e}"));
    let mut digest = StreamDigest::new();
    let mut prefix = [0u8; 8];
    backup.read_exact(&mut prefix).map_err(io)?;
    digest.feed(&prefix)?;
    let meta_len = u32::from_be_bytes(prefix[4..].try_into().expect("4 bytes")) as usize;
    if meta_len > META_BYTES_MAX {
        return Err(StoreError::Inconsistent(format!(
            "the backup's header claims {meta_len} bytes of metadata: not a backup"
        )));
    }
    let mut meta = vec![0; meta_len];
    backup.read_exact(&mut meta).map_err(io)?;
    digest.feed(&meta)?;
    let source_index = digest.meta().and_then(|m| m.last_log_id).map(|id| id.index);
    // The ledger's snapshot as it is, after a header for a cluster not formed yet.
    let fresh = SnapshotMeta::default();
    let standby = Standby::open(disk.clone())?;
    let mut receiver = standby.receive()?;
    receiver.push(&stream_head(&fresh)?)?;
    loop {
        let mut piece = vec![0; RESTORE_PIECE_BYTES];
        let read = backup.read(&mut piece).map_err(io)?;
        if read == 0 {
            break;
        }
        piece.truncate(read);
        digest.feed(&piece)?;
        receiver.push(&piece)?;
    }
    install(&standby, &fresh, &receiver.finish(&fresh)?, |_| Ok(()))?;
    Ok(Restored {
        source_index,
        state_digest: digest.finish(),
    })
}
